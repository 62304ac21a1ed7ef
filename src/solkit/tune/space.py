"""Declarative search spaces over kernel meta-parameters, with constraints and a static pre-filter.

A :class:`Space` is an ordered cartesian product of parameter values (block sizes, ``num_warps``,
``num_stages``, group sizes, switches...) minus the configs that a constraint rejects. Constraints
are Python callables or expression strings over the parameter names (strings keep a space JSON
serialisable, so a Triton solution can declare it in a module-level ``SOLKIT_TUNE_SPACE`` dict).

The shared-memory pre-filter rejects configs whose estimated shared memory exceeds the device's
per-block limit *before* they are compiled. It is a soft filter: the estimate is an upper bound for
the classic GEMM pipeline (measured on an H200 it caught every out-of-resources config and wrongly
rejected a few valid ones, see docs/tune.md), so ``smem_slack`` lets a user loosen it. The real
``OutOfResources`` raised when a compiled kernel is loaded stays the ground truth.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError
from solkit.problems.expr import ExprError, evaluate, names_in

Config = dict[str, Any]
Constraint = Callable[[Mapping[str, Any]], bool] | str

_SMEM_FILE = Path(__file__).with_name("data") / "smem_limits.json"


def config_key(config: Mapping[str, Any]) -> str:
    """Canonical, order-independent text key of a config (used in caches and as a tie-breaker)."""
    return json.dumps({k: config[k] for k in sorted(config)}, sort_keys=True, separators=(",", ":"))


def smem_limit(arch: str | None = None) -> int | None:
    """Per-block shared-memory limit in bytes: queried from the live device, else from the data file."""
    if arch is None:
        try:  # the live device is the ground truth when there is one
            import torch

            if torch.cuda.is_available():
                from triton.runtime import driver

                dev = torch.cuda.current_device()
                return int(driver.active.utils.get_device_properties(dev)["max_shared_mem"])
        except Exception:  # noqa: BLE001 - no driver, interpreter mode: fall back to the table
            return None
        return None
    table = json.loads(_SMEM_FILE.read_text())["max_shared_mem_bytes"]
    if arch not in table:
        raise SolkitError(
            f"unknown arch {arch!r} for the shared-memory pre-filter; allowed: {', '.join(sorted(table))}"
        )
    return int(table[arch])


def _compile_expr(expr: str, names: Iterable[str]) -> Callable[[Mapping[str, Any]], Any]:
    """A constraint/estimate expression through the one safe evaluator (solkit.problems.expr): arithmetic,
    comparisons, min/max/abs/log2/ceil/floor over the parameter names."""
    try:
        used = names_in(expr)
    except ExprError as exc:
        why = "not valid Python" if "cannot parse" in str(exc) else "only arithmetic, comparisons and functions"
        raise SolkitError(f"space expression {expr!r}: {why} ({exc})") from None
    allowed = set(names)
    if unknown := sorted(used - allowed):
        raise SolkitError(f"space expression {expr!r} uses unknown name {unknown[0]!r}; allowed: {sorted(allowed)}")
    return lambda cfg: evaluate(expr, cfg)


class Space:
    """An ordered product of parameter values minus constrained-out configs.

    ``params`` maps a name to its candidate values (kept in the given order, which defines the
    neighbourhood used by local strategies: ordinal parameters should be listed sorted).
    ``num_warps``/``num_stages``/``num_ctas``/``maxnreg`` are launch options; the rest are kernel
    constexpr meta-parameters (see :meth:`split`).
    """

    LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")

    def __init__(
        self,
        params: Mapping[str, Sequence[Any]],
        constraints: Sequence[Constraint] = (),
        *,
        smem_bytes: Callable[[Mapping[str, Any]], float] | str | None = None,
        smem_limit_bytes: int | None = None,
        smem_slack: float = 1.0,
        name: str = "",
    ) -> None:
        if not params:
            raise SolkitError("a tuning space needs at least one parameter")
        self.params: dict[str, list[Any]] = {}
        for k, vals in params.items():
            vals = list(vals)
            if not vals:
                raise SolkitError(f"tuning space parameter {k!r} has no values")
            if len({json.dumps(v) for v in vals}) != len(vals):
                raise SolkitError(f"tuning space parameter {k!r} has duplicate values: {vals}")
            self.params[str(k)] = vals
        self.names = list(self.params)
        self._constraint_src = [c for c in constraints if isinstance(c, str)]
        self._constraints = [_compile_expr(c, self.names) if isinstance(c, str) else c for c in constraints]
        self._smem_src = smem_bytes if isinstance(smem_bytes, str) else None
        self._smem = _compile_expr(smem_bytes, self.names) if isinstance(smem_bytes, str) else smem_bytes
        self.smem_limit_bytes = smem_limit_bytes
        self.smem_slack = float(smem_slack)
        self.name = name

    # ---------------------------------------------------------------- construction helpers
    @classmethod
    def from_dict(cls, spec: Mapping[str, Any], *, smem_limit_bytes: int | None = None) -> Space:
        """Build from ``{"params": {...}, "constraints": ["expr", ...], "smem_bytes": "expr"}``."""
        if not isinstance(spec, Mapping) or "params" not in spec:
            raise SolkitError("SOLKIT_TUNE_SPACE must be a dict with a 'params' mapping of name -> list of values")
        extra = set(spec) - {"params", "constraints", "smem_bytes", "smem_slack", "name"}
        if extra:
            raise SolkitError(f"unknown SOLKIT_TUNE_SPACE keys {sorted(extra)}; allowed: params, constraints, "
                              "smem_bytes, smem_slack, name")  # fmt: skip
        return cls(
            spec["params"],
            spec.get("constraints", ()),
            smem_bytes=spec.get("smem_bytes"),
            smem_limit_bytes=smem_limit_bytes,
            smem_slack=spec.get("smem_slack", 1.0),
            name=spec.get("name", ""),
        )

    @classmethod
    def from_configs(cls, configs: Sequence[Mapping[str, Any]], name: str = "list") -> Space:
        """A space whose members are exactly ``configs`` (``triton.autotune`` list parity)."""
        if not configs:
            raise SolkitError("an empty config list cannot be tuned")
        names = sorted({k for c in configs for k in c})
        params = {k: sorted({json.dumps(c.get(k)) for c in configs}, key=_sort_json) for k in names}
        members = {config_key(c) for c in configs}
        space = cls({k: [json.loads(v) for v in vs] for k, vs in params.items()}, name=name)
        space._constraints.append(lambda cfg: config_key(cfg) in members)
        space._members = members
        return space

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"params": self.params, "constraints": self._constraint_src}
        if self._smem_src:
            out["smem_bytes"] = self._smem_src
        if getattr(self, "_members", None):
            out["members"] = sorted(self._members)
        return out

    @cached_property
    def digest(self) -> str:
        """Hash of the space *definition* (not of the evaluated list)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:16]

    # ---------------------------------------------------------------- membership
    def product(self) -> list[Config]:
        """Every combination, constraints ignored, in a fixed order."""
        return [dict(zip(self.names, vals)) for vals in itertools.product(*self.params.values())]

    def check(self, config: Mapping[str, Any], prefilter: bool = True) -> str | None:
        """None if ``config`` passes every constraint (and the pre-filter, if asked), else the reason."""
        for k in self.names:
            if k not in config or config[k] not in self.params[k]:
                return f"{k}={config.get(k)!r} not in space"
        for i, c in enumerate(self._constraints):
            try:
                ok = bool(c(config))
            except Exception as exc:  # noqa: BLE001 - a constraint that errors rejects the config
                return f"constraint {i} raised {type(exc).__name__}: {exc}"
            if not ok:
                return f"constraint {self._constraint_src[i] if i < len(self._constraint_src) else i}"
        if not prefilter:
            return None
        est = self.smem_estimate(config)
        if est is not None and self.smem_limit_bytes and est > self.smem_limit_bytes * self.smem_slack:
            return f"shared memory estimate {int(est)} B > limit {self.smem_limit_bytes} B"
        return None

    def smem_estimate(self, config: Mapping[str, Any]) -> float | None:
        return None if self._smem is None else float(self._smem(config))

    @cached_property
    def configs(self) -> list[Config]:
        """The members that pass constraints and the pre-filter, in canonical order."""
        return [c for c in self.product() if self.check(c) is None]

    def candidates(self) -> list[Config]:
        """Members that pass the constraints, pre-filter ignored (what an exhaustive sweep measures)."""
        return [c for c in self.product() if self.check(c, prefilter=False) is None]

    def __len__(self) -> int:
        return len(self.configs)

    def __contains__(self, config: Mapping[str, Any]) -> bool:
        return self.check(config) is None

    # ---------------------------------------------------------------- geometry
    def coords(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        """Value indices of ``config`` (its position on each parameter's ordinal axis)."""
        return tuple(self.params[k].index(config[k]) for k in self.names)

    def from_coords(self, coords: Sequence[int]) -> Config:
        return {k: self.params[k][i] for k, i in zip(self.names, coords)}

    def neighbors(self, config: Mapping[str, Any], radius: int = 1) -> list[Config]:
        """Valid configs that differ from ``config`` in one parameter by at most ``radius`` steps."""
        base = self.coords(config)
        out: list[Config] = []
        for d, k in enumerate(self.names):
            for step in range(-radius, radius + 1):
                j = base[d] + step
                if step == 0 or not 0 <= j < len(self.params[k]):
                    continue
                cand = list(base)
                cand[d] = j
                cfg = self.from_coords(cand)
                if self.check(cfg) is None:
                    out.append(cfg)
        return out

    def neighbors2(self, config: Mapping[str, Any]) -> list[Config]:
        """Valid configs one step away in exactly two parameters (e.g. 256x128 -> 128x256 tiles)."""
        base = self.coords(config)
        out: list[Config] = []
        for a, b in itertools.combinations(range(len(self.names)), 2):
            for da in (-1, 1):
                for db in (-1, 1):
                    cand = list(base)
                    cand[a] += da
                    cand[b] += db
                    if not (
                        0 <= cand[a] < len(self.params[self.names[a]])
                        and 0 <= cand[b] < len(self.params[self.names[b]])
                    ):
                        continue
                    cfg = self.from_coords(cand)
                    if self.check(cfg) is None:
                        out.append(cfg)
        return out

    def split(self, config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(constexpr meta-parameters, launch options) of a config."""
        meta = {k: v for k, v in config.items() if k not in self.LAUNCH_OPTIONS}
        launch = {k: v for k, v in config.items() if k in self.LAUNCH_OPTIONS}
        return meta, launch


def _sort_json(text: str) -> tuple[int, Any]:
    value = json.loads(text)
    return (0, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else (1, text)


def gemm_smem_bytes(elem_bytes: int = 2) -> str:
    """The classic pipelined-GEMM estimate: (BLOCK_M + BLOCK_N) * BLOCK_K * num_stages * element bytes."""
    return f"(BLOCK_M + BLOCK_N) * BLOCK_K * num_stages * {int(elem_bytes)}"
