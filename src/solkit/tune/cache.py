"""Persistent cache of every measured config.

An entry is keyed by what changes a kernel's best config: the kernel source hash, the shape bucket,
the dtypes, the device's fingerprint (:func:`fingerprint`: product id, device name, compute capability,
SM count, memory size), and the Triton / CUDA / torch versions. Two different GPUs never share an entry
(an H100 PCIe and an H100 SXM differ in SM count even where the name matched). The entry stores *every*
config measured under that key (time, status, compile and benchmark seconds), not just the
winner, so:

* adding a config to a space measures only that config (the others are read back);
* the winner is a pure function of the stored records (lowest time, then lowest canonical config
  key), so every process reading the same entry picks the same config;
* other shapes of the same kernel on the same device give a warm start (:meth:`TuneCache.prior`);
* another device's records seed a new device's search (:meth:`TuneCache.warm_start`): its best configs are
  measured first on the new device, never taken as they are;
* entries can be exported to, and imported from, one JSON file (share them between machines or ranks).

Files: ``<root>/<kernel hash>/<entry hash>.json``, written atomically (temp file + rename), so a reader never
sees half a file. Several processes may add to one entry at once (the workers of ``solkit tune --devices``, or
autotuning kernels in parallel jobs): each read-merge-write of an entry holds an exclusive ``flock`` on
``<entry hash>.lock`` beside it, so no writer's records are lost. Readers take no lock. A lock is local to one
machine's filesystem: each Ray node keeps its own cache, merged with ``--cache-export`` / ``--cache-import``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError
from solkit.paths import cache_dir
from solkit.tune.space import Config, config_key
from solkit.tune.strategies import Prior

FORMAT = 2  # 2: the device fingerprint (SM count, memory size, product id) joined the key
#: The parts of :func:`environment` that identify a device; two devices share cache entries only if all agree.
FINGERPRINT_FIELDS = ("product", "device", "capability", "sm_count", "memory_bytes")


def default_root() -> Path:
    env = os.environ.get("SOLKIT_TUNE_CACHE")
    if env:
        return Path(env)
    return cache_dir("tune")


def shape_bucket(value: Any, mode: str = "pow2") -> Any:
    """Bucket an integer shape value: exact up to 64, then the next power of two (``mode="pow2"``)."""
    if isinstance(value, bool) or not isinstance(value, int) or mode == "exact":
        return value
    if value <= 64:
        return value
    return 1 << math.ceil(math.log2(value))


def environment() -> dict[str, Any]:
    """Device model and software versions, the parts of the key that describe the machine."""
    env: dict[str, Any] = {}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(torch.cuda.current_device())
            env["device"] = p.name
            env["capability"] = f"sm_{p.major}{p.minor}"
            env["sm_count"] = p.multi_processor_count
            env["memory_bytes"] = p.total_memory
            env["product"] = _product_id(p.name, p.multi_processor_count, p.total_memory)
        else:
            env["device"] = "cpu"
    except ImportError:  # pragma: no cover - torch is a dependency
        env["device"] = "unknown"
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    env["interpreter"] = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    return env


def _product_id(name: str, sm_count: int, memory_bytes: int) -> str | None:
    from solkit.hardware.specs import match_spec

    spec = match_spec(name, sm_count, memory_bytes)
    return spec.id if spec else None


def fingerprint(env: Mapping[str, Any]) -> dict[str, Any]:
    """The device part of a cache key: product id (None off the database), name, capability, SMs, memory."""
    return {f: env.get(f) for f in FINGERPRINT_FIELDS}


def fingerprint_id(fp: Mapping[str, Any]) -> str:
    """A short stable name of a fingerprint (12 hex digits), to name a device on the command line."""
    return hashlib.sha256(json.dumps(dict(fp), sort_keys=True, default=str).encode()).hexdigest()[:12]


def describe_fingerprint(fp: Mapping[str, Any]) -> str:
    """``h200-sxm (NVIDIA H200, sm_90, 132 SMs, 141 GB) [3f2a...]``."""
    parts = [str(fp.get(f)) for f in ("device", "capability") if fp.get(f)]
    if fp.get("sm_count"):
        parts.append(f"{fp['sm_count']} SMs")
    if fp.get("memory_bytes"):
        parts.append(f"{fp['memory_bytes'] / 1e9:.0f} GB")
    return f"{fp.get('product') or fp.get('device') or '?'} ({', '.join(parts)}) [{fingerprint_id(fp)}]"


def _cc_name(text: str) -> str | None:
    t = text.strip().lower().removeprefix("sm_").replace(".", "")
    return f"sm_{t}" if t.isdigit() and len(t) in (2, 3) else None


def fingerprint_matches(fp: Mapping[str, Any], ref: str) -> bool:
    """Does ``ref`` name this device: its product id, its device name, its compute capability (``sm_90``,
    ``9.0``) or its fingerprint id (a prefix of at least 6 hex digits)? Case-insensitive."""
    r = ref.strip().lower()
    if not r:
        return False
    if r in (str(fp.get("product") or "").lower(), str(fp.get("device") or "").lower()):
        return True
    if _cc_name(r) is not None and _cc_name(r) == fp.get("capability"):
        return True
    return len(r) >= 6 and fingerprint_id(fp).startswith(r)


def source_hash(obj: Any) -> str:
    """Hash of a kernel's source: Triton's own ``cache_key`` for a JIT function, else the source text."""
    inner = obj
    while not hasattr(inner, "cache_key") and hasattr(inner, "fn"):
        inner = inner.fn
    key = getattr(inner, "cache_key", None)
    if isinstance(key, str):
        return hashlib.sha256(key.encode()).hexdigest()[:16]
    import inspect

    try:
        text = inspect.getsource(getattr(inner, "fn", inner))
    except (OSError, TypeError):
        text = repr(obj)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def make_key(kernel_hash: str, shape: Mapping[str, Any], dtypes: Iterable[str], env: Mapping[str, Any] | None = None,
             bucket: str = "pow2") -> dict[str, Any]:  # fmt: skip
    env = dict(env if env is not None else environment())
    return {
        "format": FORMAT,
        "kernel": kernel_hash,
        "shape": {k: shape_bucket(v, bucket) for k, v in sorted(shape.items())},
        "dtypes": list(dtypes),
        "fingerprint": fingerprint(env),
        "versions": {k: env.get(k) for k in ("triton", "cuda", "torch")},
        "interpreter": env.get("interpreter", False),
    }


def key_hash(key: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]


def pick_winner(records: Mapping[str, Mapping[str, Any]], candidates: Iterable[str] | None = None) -> str | None:
    """Deterministic winner: the lowest time among ``ok`` records, ties broken by the config key."""
    allowed = set(candidates) if candidates is not None else None
    best: tuple[float, str] | None = None
    for k, rec in records.items():
        if allowed is not None and k not in allowed:
            continue
        t = rec.get("time_ms")
        if rec.get("status") != "ok" or t is None or not math.isfinite(t):
            continue
        if best is None or (t, k) < best:
            best = (t, k)
    return best[1] if best else None


class TuneCache:
    """Per-key records of measured configs on disk."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    def _path(self, key: Mapping[str, Any]) -> Path:
        return self.root / str(key["kernel"]) / f"{key_hash(key)}.json"

    def load(self, key: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """Records of this key: {config_key: record}; empty if none (a corrupt file counts as empty)."""
        path = self._path(key)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}
        return data.get("records", {}) if data.get("key") == json.loads(json.dumps(key, default=str)) else {}

    @contextlib.contextmanager
    def _locked(self, key: Mapping[str, Any]):
        """Hold the entry's lock: one read-merge-write at a time, across processes."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def add(self, key: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        """Merge evaluation records (each with a ``config``) into the entry and write it atomically."""
        records = [dict(rec) for rec in records]
        with self._locked(key):
            current = self.load(key)
            for rec in records:
                current[config_key(rec["config"])] = rec
            self._write(key, current)
        return current

    def _write(self, key: Mapping[str, Any], records: Mapping[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps({"key": key, "records": records}, sort_keys=True, default=str, allow_nan=False)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            fh.write(payload)
        os.replace(tmp, path)

    def winner(self, key: Mapping[str, Any], candidates: Iterable[Config] | None = None) -> Config | None:
        records = self.load(key)
        cand_keys = [config_key(c) for c in candidates] if candidates is not None else None
        k = pick_winner(records, cand_keys)
        return dict(records[k]["config"]) if k else None

    def entries(self, kernel_hash: str | None = None) -> list[dict[str, Any]]:
        paths = (self.root / kernel_hash).glob("*.json") if kernel_hash else self.root.glob("*/*.json")
        out = []
        for p in sorted(paths):
            try:
                out.append(json.loads(p.read_text()))
            except (OSError, json.JSONDecodeError):
                continue
        return out

    def prior(self, key: Mapping[str, Any]) -> Prior:
        """Warm start: entries of the same kernel, device and versions at *other* shapes."""
        runs = []
        for entry in self.entries(str(key["kernel"])):
            k = entry.get("key", {})
            same_machine = all(k.get(f) == key.get(f) for f in ("fingerprint", "versions", "dtypes", "interpreter"))
            if same_machine and k.get("shape") != key.get("shape"):
                runs.append({ck: (r.get("time_ms") if r.get("status") == "ok" else None)
                             for ck, r in entry.get("records", {}).items()})  # fmt: skip
        return Prior.from_times(runs)

    def fingerprints(self, kernel_hash: str | None = None) -> list[dict[str, Any]]:
        """The distinct device fingerprints with records (of one kernel, or of all)."""
        seen: dict[str, dict[str, Any]] = {}
        for entry in self.entries(kernel_hash):
            fp = entry.get("key", {}).get("fingerprint")
            if isinstance(fp, dict):
                seen.setdefault(fingerprint_id(fp), fp)
        return list(seen.values())

    def warm_start(self, key: Mapping[str, Any], source: str, top: int = 4) -> tuple[Prior, list[Config], list[str]]:
        """Seed a search on this key's device from another device's records of the same kernel and dtypes.

        ``source`` names the other device (:func:`fingerprint_matches`: product id, device name, ``sm_90`` or a
        fingerprint id); every shape it measured counts, this key's own shape first. Returns the prior (relative
        speeds per config), the ``top`` configs with the best mean relative speed there (to be measured first
        here: a config that won on another part is a guess to check, never a result), and the devices used.
        Records of this key's own device are left out (those are the cache itself). No match is a one-line error
        listing the devices the cache holds for this kernel.
        """
        own = key.get("fingerprint") or {}
        runs, used, configs = [], {}, {}
        entries = sorted(self.entries(str(key["kernel"])), key=lambda e: e.get("key", {}).get("shape") != key["shape"])
        for entry in entries:
            k = entry.get("key", {})
            fp = k.get("fingerprint")
            if not isinstance(fp, dict) or fp == own or not fingerprint_matches(fp, source):
                continue
            if k.get("dtypes") != key.get("dtypes") or k.get("interpreter") != key.get("interpreter"):
                continue
            records = entry.get("records", {})
            runs.append({ck: (r.get("time_ms") if r.get("status") == "ok" else None) for ck, r in records.items()})
            configs.update({ck: r["config"] for ck, r in records.items() if r.get("status") == "ok"})
            used[fingerprint_id(fp)] = describe_fingerprint(fp)
        prior = Prior.from_times(runs)
        if not prior:
            known = [describe_fingerprint(fp) for fp in self.fingerprints(str(key["kernel"])) if fp != own]
            raise SolkitError(
                f"--warm-start-from {source}: no measured configs of this kernel ({', '.join(key['dtypes'])}) from a "
                f"device matching {source!r} in {self.root}; recorded: {', '.join(known) or 'none'} "
                "(bring another machine's records with --cache-import)"
            )
        ranked = sorted(configs, key=lambda ck: (-(prior.score(ck) or 0.0), ck))
        return prior, [dict(configs[ck]) for ck in ranked[:top]], list(used.values())

    def export(self, path: str | Path, kernel_hash: str | None = None) -> int:
        entries = self.entries(kernel_hash)
        Path(path).write_text(json.dumps({"solkit_tune_cache": FORMAT, "entries": entries}, default=str))
        return len(entries)

    def import_(self, path: str | Path) -> int:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SolkitError(f"cannot read tune cache export {path}: {exc}") from None
        if (
            not isinstance(data, dict)
            or data.get("solkit_tune_cache") != FORMAT
            or not isinstance(data.get("entries"), list)
        ):
            raise SolkitError(f"{path} is not a solkit tune cache export (format {FORMAT})")
        for entry in data["entries"]:
            with self._locked(entry["key"]):
                merged = self.load(entry["key"])
                merged.update(entry.get("records", {}))
                self._write(entry["key"], merged)
        return len(data["entries"])
