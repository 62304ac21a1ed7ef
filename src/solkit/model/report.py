"""The model report: per-call rows scored against T_SOL, grouped per operator, module type and layer."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from solkit.model.advice import kernel_advice
from solkit.model.attribute import OpEvent
from solkit.model.clocks import StepClocks
from solkit.model.gemms import gemm_entries
from solkit.model.ranking import Spread, rank
from solkit.model.work import LIST_OPS
from solkit.sol.model import Ceilings, sol_fraction, t_sol
from solkit.sol.tiers import tier_for

#: The goal for the share of measured time attributed to operators with a T_SOL.
ATTRIBUTED_GOAL = 0.95
#: A row whose T_SOL is below this share of its measured time has a T_SOL of ~0: its counted work explains none of
#: its time (a kernel charged to the wrong call's work, or time that is all launch and dispatch).
NEAR_ZERO_SOL = 1e-3


@dataclass
class Group:
    """Rows added up: per operator (and shapes), per module type, per category or per layer."""

    name: str
    calls: int = 0
    time_s: float = 0.0
    t_sol_s: float = 0.0
    timed_with_sol_s: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    bound: str = ""
    category: str = ""
    module_type: str = ""
    kind: str = ""
    advice: str = ""
    kernel: str = ""
    violation: bool = False
    shapes: str = ""
    out_shape: tuple = ()
    members: list[int] = field(default_factory=list, repr=False)  # indices of its rows in ModelReport.rows
    what_if: dict[str, dict[str, Any]] | None = None  # per product id: T_SOL, bound, tier (solkit.model.whatif)
    lost_steps_s: list[float] = field(default_factory=list)  # its time lost in each profiled step (add_steps)

    @property
    def lost_s(self) -> float:
        return max(self.timed_with_sol_s - self.t_sol_s, 0.0)

    @property
    def spread(self) -> Spread:
        """Time lost (ms) over the profiled steps: median, min, max (this step's alone before :func:`add_steps`)."""
        return Spread.of([x * 1e3 for x in (self.lost_steps_s or [self.lost_s])])

    @property
    def near_zero(self) -> bool:
        """Measured time with a T_SOL of ~0 (see NEAR_ZERO_SOL)."""
        return self.timed_with_sol_s > 0 and self.t_sol_s < NEAR_ZERO_SOL * self.timed_with_sol_s

    @property
    def sol_fraction(self) -> float | None:
        if not self.timed_with_sol_s:
            return None
        return sol_fraction(self.t_sol_s, self.timed_with_sol_s).sol_fraction

    def to_dict(self) -> dict[str, Any]:
        frac = self.sol_fraction
        tier = tier_for(frac, self.bound or "memory") if frac is not None else None
        return {
            "name": self.name,
            "calls": self.calls,
            "time_ms": self.time_s * 1e3,
            "t_sol_ms": self.t_sol_s * 1e3 if self.timed_with_sol_s else None,
            "sol_fraction": frac,
            "lost_ms": self.lost_s * 1e3,
            "violation": self.violation,
            "flops": self.flops,
            "bytes": self.bytes,
            "bound": self.bound,
            "category": self.category,
            "module_type": self.module_type,
            "kind": self.kind,
            "shapes": self.shapes,
            "out_shape": list(self.out_shape),
            "tier": tier.label if tier else None,
            "advice": " ".join(a for a in (tier.advice if tier else "no T_SOL: its work is unknown", self.advice) if a),
            "solkit_kernel": self.kernel or None,
            **({"what_if": self.what_if} if self.what_if is not None else {}),
        }


@dataclass
class ModelReport:
    """Everything `solkit model` reports about one measured step."""

    meta: dict[str, Any]
    rows: list[OpEvent]
    measured_s: float
    ceilings: Ceilings
    wall_s: float = 0.0
    overhead_s: float = 0.0
    ops: list[Group] = field(default_factory=list)
    categories: list[Group] = field(default_factory=list)
    module_types: list[Group] = field(default_factory=list)
    layers: list[Group] = field(default_factory=list)
    t_sol_s: float = 0.0
    attributed_s: float = 0.0
    what_if: dict[str, Any] | None = None  # the step on other products (solkit.model.whatif.add_what_if)
    clocks: StepClocks | None = None  # the SM clock and power while the step's kernels ran (a GPU only)

    @property
    def attributed_share(self) -> float:
        return self.attributed_s / self.measured_s if self.measured_s else 0.0

    @property
    def near_zero_share(self) -> float:
        """Of the measured time: on operators whose T_SOL is ~0 (NEAR_ZERO_SOL)."""
        near = sum(g.timed_with_sol_s for g in self.ops if g.near_zero)
        return near / self.measured_s if self.measured_s else 0.0

    @property
    def step_sol(self) -> float:
        return sol_fraction(self.t_sol_s, self.measured_s).sol_fraction if self.measured_s else 0.0

    @property
    def violation(self) -> bool:
        return self.t_sol_s > self.measured_s

    def ranking(self) -> list[dict[str, Any]]:
        """Every operator by median time lost over the profiled steps, with spread and ties (solkit.model.ranking);
        ``index`` is the operator's place in ``ops``, ``name`` its name (with its module type where two share one)."""
        seen = Counter(g.name for g in self.ops)
        keys = [f"{g.name} [{g.category}, {g.kind}]" if seen[g.name] > 1 else g.name for g in self.ops]
        where = {k: i for i, k in enumerate(keys)}
        out = rank([(k, g.spread) for k, g in zip(keys, self.ops)])
        for r in out:
            r["index"] = where[r["name"]]
        return out

    def top(self, k: int = 5) -> list[Group]:
        return [self.ops[r["index"]] for r in self.ranking()[:k]]

    def to_dict(self, top: int | None = None) -> dict[str, Any]:
        ranking = self.ranking()
        fields = ("place", "rank_label", "tie_group", "lost_ms_median", "lost_ms_min", "lost_ms_max")
        shown = ranking[:top] if top else ranking
        return {
            "meta": self.meta,
            "summary": {
                "measured_ms": self.measured_s * 1e3,
                "wall_ms": self.wall_s * 1e3,
                "t_sol_ms": self.t_sol_s * 1e3,
                "step_sol": self.step_sol,
                "step_sol_raw": self.t_sol_s / self.measured_s if self.measured_s else None,
                "sum_t_sol_le_measured": not self.violation,
                # Kernel time on one stream cannot exceed the step's wall time; above it (by more than the 5 % the
                # wall clock's own start-up may hide) the attribution counted a kernel twice, or streams overlapped.
                "measured_le_wall": self.measured_s <= 1.05 * self.wall_s if self.wall_s else None,
                "attributed_share": self.attributed_share,
                "attributed_goal": ATTRIBUTED_GOAL,
                # of the attributed share: time on operators whose T_SOL is ~0 (below NEAR_ZERO_SOL of their time)
                "t_sol_near_zero_share": self.near_zero_share,
                "t_sol_near_zero_ops": [
                    g.name for g in sorted(self.ops, key=lambda g: -g.timed_with_sol_s) if g.near_zero
                ][:10],
                "analysis_overhead_s": self.overhead_s,
                "top5_by_time_lost": [r["name"] for r in ranking[:5]],
                "steps_profiled": self.meta.get("steps_profiled", 1),
                # every operator's place, tie group and spread: what `top_stability` compares between two runs
                "ranking": [{k: r[k] for k in ("name", *fields)} for r in ranking],
            },
            "ops": [{**self.ops[r["index"]].to_dict(), **{k: r[k] for k in fields}} for r in shown],
            "categories": [g.to_dict() for g in self.categories],
            "module_types": [g.to_dict() for g in self.module_types],
            "layers": [g.to_dict() for g in self.layers],
            "gemms": gemm_entries(self.rows, self.ceilings, self.clocks),  # what `solkit model-check` times
            "ceilings": self.ceilings.to_dict(),
            **({"what_if": self.what_if} if self.what_if else {}),
        }


def _row_sol(r: OpEvent, ceilings: Ceilings) -> tuple[float | None, str]:
    if not r.match:
        return None, ""
    res = t_sol(r.flops, r.bytes, ceilings)
    return res.t_sol_s, res.bound


def _shape_text(r: OpEvent) -> str:
    if not r.shapes and r.op.startswith(LIST_OPS) and r.dtypes:  # a list of 0-dim tensors (step counters)
        return f"[{len(r.dtypes)} x 0-dim]"
    return " x ".join("[" + ",".join(str(d) for d in s) + "]" for s in r.shapes[:3])


def _add(g: Group, r: OpEvent, ts: float | None, bound: str) -> None:
    g.calls += 1
    g.time_s += r.time_s
    if ts is not None:
        g.t_sol_s += ts
        g.timed_with_sol_s += r.time_s
        g.flops += sum(r.flops.values())
        g.bytes += r.bytes
        g.violation = g.violation or ts > r.time_s
        if not g.bound or bound == "compute":
            g.bound = bound


def build_report(rows: list[OpEvent], measured_s: float, ceilings: Ceilings, meta: dict[str, Any]) -> ModelReport:
    """Score every row on ``ceilings`` and group them; ``measured_s`` is the step's total measured time."""
    rep = ModelReport(meta=meta, rows=rows, measured_s=measured_s, ceilings=ceilings)
    ops: dict[tuple, Group] = {}
    cats: dict[str, Group] = defaultdict(lambda: Group(""))
    types: dict[str, Group] = defaultdict(lambda: Group(""))
    layers: dict[str, Group] = defaultdict(lambda: Group(""))
    for i, r in enumerate(rows):
        ts, bound = _row_sol(r, ceilings)
        if ts is not None:
            rep.t_sol_s += ts
            rep.attributed_s += r.time_s
        direction = " (bwd)" if r.backward else ""
        key = op_key(r)
        g = ops.get(key)
        if g is None:
            g = ops[key] = Group(f"{r.op}{direction} {_shape_text(r)}".strip(), category=r.category, kind=r.kind,
                                 module_type=r.module_type, shapes=_shape_text(r), out_shape=r.out_shape)  # fmt: skip
            g.advice = kernel_advice(r.op, r.category, r.module_type)
            g.kernel = g.advice.split(" (")[0].removeprefix("solkit has ") if g.advice else ""
        _add(g, r, ts, bound)
        g.members.append(i)
        where = ((cats, r.category), (types, r.module_type or "(none)"), (layers, r.layer or "(outside layers)"))
        for table, name in where:
            table[name].name = name
            _add(table[name], r, ts, bound)
    rep.ops = list(ops.values())
    for table, target in ((cats, rep.categories), (types, rep.module_types)):
        target.extend(sorted(table.values(), key=lambda g: g.lost_s, reverse=True))
    for g in rep.categories:
        g.category = g.name
        g.advice = kernel_advice("", g.name, "")
    rep.layers = sorted(layers.values(), key=lambda g: _layer_order(g.name))
    return rep


def op_key(r: OpEvent) -> tuple:
    """The operator a row adds up into (one entry of the per-operator table)."""
    return (r.op, r.shapes, r.category, r.backward, r.kind)


def add_steps(rep: ModelReport, steps: list[list[OpEvent]]) -> None:
    """Each operator's time lost in every profiled step (``steps``: each step's attributed rows, ``rep``'s own
    among them); an operator with no row in a step lost nothing there."""
    by_key = {op_key(rep.rows[g.members[0]]): g for g in rep.ops if g.members}
    for g in rep.ops:
        g.lost_steps_s = []
    for rows in steps:
        timed: dict[tuple, list[float]] = {}
        for r in rows:
            ts, _ = _row_sol(r, rep.ceilings)
            if ts is not None:
                acc = timed.setdefault(op_key(r), [0.0, 0.0])
                acc[0] += r.time_s
                acc[1] += ts
        for key, g in by_key.items():
            t, ts = timed.get(key, (0.0, 0.0))
            g.lost_steps_s.append(max(t - ts, 0.0))
    rep.meta["steps_profiled"] = len(steps)


def _layer_order(name: str) -> tuple:
    nums = [int(p) for p in name.split(".") if p.isdigit()]
    return (0 if nums else 1, nums, name)
