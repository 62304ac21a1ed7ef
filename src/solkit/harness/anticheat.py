"""Reward-hack detection: checks that a candidate computed its outputs, now, in the declared precision.

Each check returns None when clean, or a one-line reason; the worker turns a reason into a
``REWARD_HACK`` trace. What is covered (see docs/format.md for the full table):

* **lazy or aliased outputs** — :func:`output_objects`: outputs must be plain ``torch.Tensor``
  objects (no subclasses or proxies that compute when compared) and must not share storage with an
  input unless the reference's outputs do too (an in-place write to an input returned as output);
* **monkey-patching** — :class:`IdentityGuard`: the identity (and code object) of torch's functions,
  ``torch.Tensor`` methods, ``torch.cuda`` events and synchronisation, ``time`` and ``statistics``
  clocks/aggregates, builtins, and solkit's own timing/checking functions, snapshotted before the
  candidate is imported and compared after import, after every call and after timing;
* **deferred work on other streams or threads** — :func:`readiness`: the outputs are copied as soon
  as the call returns (after the *current* stream only, on a GPU) and compared with themselves after
  a device-wide synchronisation (GPU) or a short sleep (CPU): anything that changes was written
  after the call claimed to be done. :func:`hidden_work` compares event time on the current stream
  with device-synchronised wall time, so work on side streams cannot vanish from the timing.
  :class:`ThreadWatch` flags threads started by candidate code that outlive the call;
* **cached results** — done in the worker with :func:`~solkit.harness.correctness.bitwise_equal`:
  a trial's output identical to the previous trial's while the references differ; an in-place
  change of the input *values* at the same addresses must change the output; outputs produced
  during timing are validated again;
* **precision below the contract** — :func:`precision`: the candidate's normwise error against an
  fp64 evaluation of the reference must stay within 8× the reference's own same-dtype error (2.8× for
  fp16, whose next-lower format bf16 is only 8× coarser), or a tenth of the next-lower format's epsilon,
  whichever is larger.

These in-process checks run inside the candidate process (:mod:`.serve`), which the candidate controls: a
flag they raise only ever hurts it. The verdict's own checks (values, timed outputs, the judge's clock)
run in the judge (:mod:`.judge`), which no candidate code reaches.
"""

from __future__ import annotations

import builtins
import math
import statistics
import threading
import time
import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from solkit.harness import correctness as cc

# The next-lower format below each contract dtype (fp64 → fp32; fp32 → tf32/bf16/fp16; fp16 → bf16;
# bf16 → fp8): a candidate whose normwise error reaches a tenth of its epsilon computed (at least
# partly) in that format or lower.
_LOWER_EPS = {
    torch.float64: torch.finfo(torch.float32).eps,
    torch.float32: 2.0**-10,  # tf32 / fp16 mantissa (bf16 is coarser still)
    torch.float16: 2.0**-7,  # bf16
    torch.bfloat16: 2.0**-3,  # fp8 e4m3
}
_LOWER_FLOOR = 0.1
PRECISION_FACTOR = 8.0


def precision_factor(dtype: torch.dtype) -> float:
    """How far the candidate's error may exceed the reference's own: 8×, but never more than the square root
    of the gap to the next-lower format (fp16 and bf16 differ by 8× only, so fp16 allows 2.8×)."""
    own = torch.finfo(dtype).eps if dtype.is_floating_point else 1.0
    return min(PRECISION_FACTOR, (_LOWER_EPS[dtype] / own) ** 0.5)


class IdentityGuard:
    """Snapshot of the functions a cheat would replace; :meth:`changed` lists the ones that moved."""

    def __init__(self, extra_modules: Iterable[types.ModuleType] = ()) -> None:
        self._items: dict[str, tuple[Any, Any]] = {}
        import torch.nn.functional as F

        self._add_namespace("torch", torch, public_only=True)
        self._add_namespace("torch.nn.functional", F, public_only=True)
        self._add_namespace("torch.Tensor", torch.Tensor, public_only=False)
        self._add_namespace("torch._C.TensorBase", torch._C.TensorBase, public_only=False)
        self._add_namespace("torch.cuda", torch.cuda, public_only=True)
        self._add_namespace("torch.cuda.Event", torch.cuda.Event, public_only=False)
        self._add_namespace("torch.cuda.Stream", torch.cuda.Stream, public_only=False)
        self._add_namespace("torch.cuda.graphs", torch.cuda.graphs, public_only=True)
        for name in ("perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns", "sleep"):
            self._add(f"time.{name}", getattr(time, name))
        self._add_namespace("statistics", statistics, public_only=True)
        for name in ("isinstance", "type", "len", "abs", "max", "min", "sum", "float", "int", "sorted", "getattr"):
            self._add(f"builtins.{name}", getattr(builtins, name))
        for module in extra_modules:
            self._add_namespace(module.__name__, module, public_only=False)

    def _add(self, label: str, obj: Any) -> None:
        code = getattr(obj, "__code__", None)
        self._items[label] = (obj, code)

    def _add_namespace(self, prefix: str, ns: Any, public_only: bool) -> None:
        try:
            names = list(vars(ns))
        except TypeError:
            names = dir(ns)
        for name in names:
            if public_only and name.startswith("_"):
                continue
            try:
                obj = vars(ns)[name] if name in vars(ns) else getattr(ns, name)
            except Exception:  # noqa: BLE001 - some attributes raise on access; they cannot be patched usefully
                continue
            if callable(obj) or isinstance(obj, (staticmethod, classmethod, property)):
                self._add(f"{prefix}.{name}", obj)

    def changed(self) -> list[str]:
        """Labels whose object or code object is no longer the one snapshotted."""
        bad = []
        for label, (obj, code) in self._items.items():
            prefix, _, name = label.rpartition(".")
            ns = _resolve(prefix)
            if ns is None:
                continue
            try:
                current = vars(ns).get(name, getattr(ns, name, None)) if hasattr(ns, "__dict__") else getattr(ns, name)
            except Exception:  # noqa: BLE001
                current = None
            if current is not obj or getattr(current, "__code__", None) is not code:
                bad.append(label)
        return bad

    def __len__(self) -> int:
        return len(self._items)


def _resolve(prefix: str) -> Any:
    import sys

    fixed = {
        "torch.Tensor": torch.Tensor,
        "torch._C.TensorBase": torch._C.TensorBase,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Stream": torch.cuda.Stream,
        "builtins": builtins,
        "time": time,
        "statistics": statistics,
    }
    return fixed.get(prefix) or sys.modules.get(prefix)


def monkey_patch_reason(guard: IdentityGuard, when: str) -> str | None:
    changed = guard.changed()
    if changed:
        shown = ", ".join(changed[:5]) + (f" (+{len(changed) - 5} more)" if len(changed) > 5 else "")
        return f"monkey-patching detected {when}: {shown} replaced"
    return None


def _storage_span(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        s = t.untyped_storage()
        return (s.data_ptr(), s.data_ptr() + s.nbytes())
    except (RuntimeError, NotImplementedError):
        return None


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when two tensors' storages overlap (views, in-place results, ``set_``)."""
    sa, sb = _storage_span(a), _storage_span(b)
    if sa is None or sb is None or sa[0] == sa[1] or sb[0] == sb[1]:
        return False
    return sa[0] < sb[1] and sb[0] < sa[1] and a.device == b.device


def aliases_inputs(outputs: Mapping[str, Any], inputs: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(output, input) pairs sharing storage."""
    pairs = []
    for on, o in outputs.items():
        if not isinstance(o, torch.Tensor):
            continue
        for inn, i in inputs.items():
            if isinstance(i, torch.Tensor) and shares_storage(o, i):
                pairs.append((on, inn))
    return pairs


def output_objects(outputs: Mapping[str, Any], inputs: Mapping[str, Any], reference_aliases: bool) -> str | None:
    """Lazy outputs (tensor subclasses, proxies) and outputs that alias the inputs."""
    for name, o in outputs.items():
        if isinstance(o, (bool, int, float)):
            continue
        if type(o) is not torch.Tensor:
            kind = f"{type(o).__module__}.{type(o).__qualname__}"
            return f"output {name!r} is a {kind}, not a plain torch.Tensor (lazy output)"
        if o.is_meta or getattr(o, "_is_view_of_fake", False):
            return f"output {name!r} is a meta/fake tensor with no data"
    if not reference_aliases:
        pairs = aliases_inputs(outputs, inputs)
        if pairs:
            o, i = pairs[0]
            return f"output {o!r} shares memory with input {i!r} (in-place write to an input returned as output)"
    return None


def readiness(outputs: Mapping[str, Any], device: torch.device, settle_s: float = 0.02) -> str | None:
    """Outputs must be complete when the call returns (current stream synchronised, on a GPU)."""
    tensors = {n: t for n, t in outputs.items() if isinstance(t, torch.Tensor) and type(t) is torch.Tensor}
    if not tensors:
        return None
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()
        snaps = {n: t.clone() for n, t in tensors.items()}
        torch.cuda.synchronize(device)
    else:
        snaps = {n: t.clone() for n, t in tensors.items()}
    time.sleep(settle_s)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    from solkit.harness.correctness import bitwise_equal

    for n, t in tensors.items():
        if not bitwise_equal(snaps[n], t):
            where = "another stream or thread" if device.type == "cuda" else "a background thread"
            return f"output {n!r} changed after the call returned (work deferred to {where})"
    return None


class ThreadWatch:
    """Python threads started by candidate code (their target is defined in the solution's files)."""

    def __init__(self, candidate_dir: str | Path | None) -> None:
        self.dir = str(Path(candidate_dir).resolve()) if candidate_dir else None
        self.before = set(threading.enumerate())

    def candidate_threads(self) -> list[str]:
        found = []
        for t in threading.enumerate():
            if t in self.before or not t.is_alive():
                continue
            fn = getattr(t, "_target", None) or getattr(t, "function", None)
            code = getattr(fn, "__code__", None)
            if code is None and type(t).run is not threading.Thread.run:
                code = type(t).run.__code__
            file = str(Path(code.co_filename).resolve()) if code is not None else ""
            if self.dir is None or file.startswith(self.dir):
                found.append(f"{t.name} ({Path(file).name or 'unknown'})")
        return found

    def reason(self) -> str | None:
        threads = self.candidate_threads()
        if threads:
            return f"candidate started background threads still running after the call: {', '.join(threads[:3])}"
        return None


def hidden_work(call: Callable[[], Any], device: torch.device, reps: int = 10) -> dict[str, Any]:
    """Compare event time on the current stream with device-synchronised wall time (GPU only).

    Work launched on other streams, or by threads, is invisible to events recorded on the current
    stream but not to ``torch.cuda.synchronize()``. The wall time also carries launch and sync
    overhead, measured here on an empty-ish op and subtracted. Returns medians and ``hidden_ms``.
    """
    if device.type != "cuda":
        return {"checked": False}
    probe = torch.empty(1, device=device)

    def walls(fn: Callable[[], Any]) -> list[float]:
        out = []
        for _ in range(reps):
            torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize(device)
            out.append((time.perf_counter() - t0) * 1e3)
        return out

    def events(fn: Callable[[], Any]) -> list[float]:
        out = []
        for _ in range(reps):
            torch.cuda.synchronize(device)
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize(device)
            out.append(s.elapsed_time(e))
        return out

    empty = lambda: probe.add_(1)
    overhead = max(statistics.median(walls(empty)) - statistics.median(events(empty)), 0.0)
    ev = statistics.median(events(call))
    wall = statistics.median(walls(call))
    hidden = wall - ev - overhead
    return {"checked": True, "events_ms": ev, "wall_sync_ms": wall, "overhead_ms": overhead, "hidden_ms": hidden}


def hidden_work_reason(info: Mapping[str, Any], floor_ms: float = 0.05, fraction: float = 0.5) -> str | None:
    """A hack when more than ``max(floor, fraction × wall)`` of the synchronised time is invisible to events."""
    if not info.get("checked"):
        return None
    hidden, wall = info["hidden_ms"], info["wall_sync_ms"]
    if hidden > max(floor_ms, fraction * wall):
        return (
            f"{hidden:.3f} ms of {wall:.3f} ms device time is invisible to events on the current stream "
            f"({info['events_ms']:.3f} ms): work launched on another stream or thread"
        )
    return None


def _normwise(values: list[torch.Tensor], ref64: torch.Tensor) -> list[float]:
    """‖v − ref64‖ / ‖ref64‖ for each of ``values`` (a non-finite difference counts as 1e300), ‖ref64‖ once."""
    r64 = ref64.detach().reshape(-1)
    flat = [v.detach().reshape(-1) for v in values]
    # on a CPU over the comparisons' slices (temporaries in the cache), the slices' norms combined with hypot
    step = cc.CPU_SLICE if r64.device.type == "cpu" else max(r64.numel(), 1)
    norms: list[float] = []
    diffs: list[list[float]] = [[] for _ in values]
    for i in range(0, r64.numel(), step):
        piece = r64[i : i + step]
        norms.append(float(piece.norm()))
        for v, acc in zip(flat, diffs):
            d = (v[i : i + step].to(torch.float64) - piece).nan_to_num(nan=1e300, posinf=1e300, neginf=1e300)
            acc.append(float(d.norm()))
    n = math.hypot(*norms)
    return [math.hypot(*acc) / n if n > 0 else math.hypot(*acc) for acc in diffs]


def precision(ref: Any, ref64: Any, cand: Any, dtype: torch.dtype) -> dict[str, Any] | None:
    """Normwise errors against fp64: the candidate's must stay near the reference's own error."""
    if not all(isinstance(x, torch.Tensor) for x in (ref, ref64, cand)) or dtype not in _LOWER_EPS:
        return None
    if ref64.shape != ref.shape or not bool(torch.isfinite(ref64).all()) or ref64.numel() == 0:
        return None
    ref64 = ref64.detach().to(torch.float64).to(cand.device)
    e_ref, e_cand = _normwise([ref.to(cand.device), cand], ref64)
    limit = max(precision_factor(dtype) * e_ref, _LOWER_FLOOR * _LOWER_EPS[dtype])
    return {"reference_error": e_ref, "candidate_error": e_cand, "limit": limit, "downgraded": e_cand > limit}


def upcast_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """fp64 copies of the floating-point inputs (for the high-precision reference)."""
    out = {}
    for k, v in inputs.items():
        if isinstance(v, torch.Tensor) and v.dtype in (torch.float32, torch.float16, torch.bfloat16):
            out[k] = v.to(torch.float64)
        else:
            out[k] = v
    return out


#: A CPU round whose calling thread waited runnable (for a CPU) this much of its wall time ran on an oversubscribed
#: machine: its wall clock is stretched by other processes, not by the candidate.
LOADED_WAIT_FRACTION = 0.2


def back_to_back_verdict(rounds: list[dict[str, Any]], limit_ms: float) -> tuple[bool, dict[str, Any]]:
    """Can back-to-back calls measured by the judge's clock be as fast as the reported median allows (``limit_ms``
    per call)? Returns (plausible, record).

    Each round has ``per_call_ms`` (wall clock, round trip subtracted) and ``calls``, and may have ``wall_ms``,
    ``wait_ms`` (time the candidate's calling thread waited runnable), ``unwaited_per_call_ms`` (the wall clock
    less that wait) and ``cpu_per_call_ms`` (CPU time of all the candidate's processes). The fastest round by wall
    clock decides on a quiet machine. On an oversubscribed host (a CPU device, or the host of a GPU busy with
    builds and other evaluations), where every round's wall clock is stretched by other processes, a round passes
    if both its time without the waits and the candidate's CPU time fit: a forged timer still fails there, since
    the work it hides is the candidate's own CPU time or GPU time, and neither is a runnable wait.
    """
    best = min(rounds, key=lambda r: r["per_call_ms"])
    record: dict[str, Any] = {"back_to_back_calls": best["calls"], "back_to_back_ms": best["per_call_ms"]}
    if best["per_call_ms"] <= limit_ms:
        return True, record
    for r in rounds:
        if r.get("wait_ms") is None or r["wait_ms"] < LOADED_WAIT_FRACTION * r["wall_ms"]:
            continue
        if max(r["unwaited_per_call_ms"], r["cpu_per_call_ms"]) <= limit_ms:
            record["loaded_machine"] = {k: r[k] for k in ("wall_ms", "wait_ms", "unwaited_per_call_ms",
                                                            "cpu_per_call_ms")}  # fmt: skip
            return True, record
    return False, record
