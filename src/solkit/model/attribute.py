"""Attribute the measured time of one profiled step to operators and fused regions.

Each GPU kernel hangs, in the profiler's event tree, under the CPU op that launched it. Walking up
from there, the kernel belongs to the outermost aten op that the meta-tensor trace also ran (so
``aten::linear -> aten::mm`` is charged to ``mm``, which has a count), or, under torch.compile, to the
Inductor kernel whose launch range carries Inductor's own estimate of the bytes crossing its boundary
(``kernel_num_gb``). On a CPU there are no kernels: each such op is charged its CPU time instead.
Whatever nothing claims stays in the step's total as unattributed time, never dropped.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from solkit.model.device_events import device_work, is_device
from solkit.model.scope import Scope, category, layer_of, param_scopes
from solkit.model.step import OPTIMIZER_SCOPE
from solkit.model.work import LIST_OPS, StepMatcher, StepWork, TracedOp, canonical

_BACKWARD_MARK = "autograd::engine::evaluate_function"


@dataclass
class OpEvent:
    """One attributed call: an aten op or an Inductor region, its time and (when known) its work."""

    op: str
    kind: str  # "aten", "region" or "unattributed"
    time_s: float
    shapes: tuple = ()
    strides: tuple = ()  # of the tensor arguments, aligned with shapes (the layout a GEMM's kernel got)
    out_shape: tuple = ()
    dtypes: tuple = ()
    flops: dict[str, float] = field(default_factory=dict)
    bytes: float = 0.0
    counted: bool = False
    match: str = ""  # "shapes", "order", "size" (a fill), "inductor", or "" when no work is known
    scope: str = ""
    module_type: str = ""
    category: str = "other"
    layer: str = ""
    backward: bool = False
    kernels: list[str] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list, repr=False)  # its device intervals (profiler us)
    note: str = ""


def _chain(evt) -> list:
    out = []
    while evt is not None:
        out.append(evt)
        evt = evt.cpu_parent
    return out  # innermost first


def _is_region(evt) -> bool:
    kw = getattr(evt, "kwinputs", None) or {}
    return "kernel_num_gb" in kw or evt.name.startswith(("triton_", "cpp_fused_"))


def _target(chain: list, names: set[str]):
    """The event a kernel (or CPU time) belongs to: an Inductor region, else the outermost traced aten op."""
    for e in chain:
        if _is_region(e):
            return e
    for e in reversed(chain):
        if e.name.startswith("aten::") and canonical(e.name) in names:
            return e
    return None


class _Scopes:
    """Module scopes of forward events, and of backward events through their sequence numbers."""

    def __init__(self, events: list):
        self.by_seq: dict[int, list[Scope]] = {}
        for e in events:
            if e.name.startswith("aten::") and getattr(e, "sequence_nr", -1) >= 0 and e.sequence_nr not in self.by_seq:
                scopes = self.forward_scopes(_chain(e))
                if scopes:
                    self.by_seq[e.sequence_nr] = scopes

    @staticmethod
    def forward_scopes(chain: list) -> list[Scope]:
        return [s for s in (Scope.parse(e.name) for e in chain) if s is not None]

    def of(self, chain: list) -> tuple[list[Scope], bool, bool]:
        """(scopes innermost first, is backward, is in the optimizer)."""
        in_opt = any(e.name == OPTIMIZER_SCOPE for e in chain)
        scopes = self.forward_scopes(chain)
        backward = any(e.name.startswith(_BACKWARD_MARK) for e in chain)
        if backward and not scopes:
            for e in chain:
                seq = getattr(e, "sequence_nr", -1)
                if seq >= 0 and seq in self.by_seq:
                    return self.by_seq[seq], True, in_opt
        return scopes, backward, in_opt


def _list_calls(events: list) -> list[tuple[Any, str, list]]:
    """The step's multi-tensor calls in program order (each outermost one, whether it launched a kernel or not: the
    step counters' update runs on the CPU), as :meth:`StepWork.matcher` aligns them with the traced ones."""
    out = []
    for i, e in enumerate(events):
        if is_device(e) or not e.name.startswith("aten::") or not canonical(e.name).startswith(LIST_OPS):
            continue
        if any(p.name.startswith("aten::") and canonical(p.name).startswith(LIST_OPS) for p in _chain(e)[1:]):
            continue
        tr = getattr(e, "time_range", None)
        out.append((tr.start if tr is not None else float(i), i, e))
    return [(e, canonical(e.name), list(e.input_shapes or [])) for _, _, e in sorted(out, key=lambda t: t[:2])]


def _work(evt, target_op: str, work: StepMatcher) -> tuple[TracedOp | None, str, dict, float, str]:
    if _is_region(evt):
        kw = evt.kwinputs or {}
        gb = kw.get("kernel_num_gb")
        flop = kw.get("kernel_flop")
        if gb is None:
            return None, "", {}, 0.0, "Inductor gave no byte estimate for this kernel"
        flops = {"fp32_vector": float(flop)} if flop else {}
        note = "" if flop else "bytes from Inductor's kernel_num_gb; its vector FLOPs are not counted"
        return None, "inductor", flops, float(gb) * 1e9, note
    traced, how = work.match(target_op, list(evt.input_shapes or []), evt)
    if traced is None:
        return None, "", {}, 0.0, "no traced op matches"
    c = traced.count
    return traced, how, {u: float(f) for u, f in c.flops.items() if f}, float(c.bytes), c.note


def attribute(
    events: list, work: StepWork, on_gpu: bool, wall_s: float | None = None, stats: dict | None = None
) -> tuple[list[OpEvent], float]:
    """Per-call rows for one profiled step, and the step's measured total (GPU kernel time, or CPU op time).

    On a GPU the device events are counted once each, inside the step's window (``wall_s`` after its first CPU
    event), on the CPU event that launched them (:mod:`solkit.model.device_events`); ``stats``, when given, receives
    what was left out and the device's busy time.
    """
    scopes = _Scopes(events)
    per_target: dict[int, dict[str, Any]] = {}
    order: list = []
    unattributed: dict[str, OpEvent] = defaultdict(lambda: OpEvent("", "unattributed", 0.0))
    total = 0.0
    dw = device_work(events, wall_s) if on_gpu else None
    for e in events:
        kernels: list[tuple[str, float, tuple | None]] = []
        if dw is not None:
            if is_device(e):
                continue
            kernels = dw.by_cpu.get(id(e), [])
            dt = sum(k[1] for k in kernels) * 1e-6
            if dt <= 0:
                continue
        else:
            if not e.name.startswith("aten::") or any(p.name.startswith("aten::") for p in _chain(e)[1:]):
                continue  # CPU time: each outermost aten op once
            dt = e.cpu_time_total * 1e-6
        total += dt
        chain = _chain(e)
        tgt = _target(chain, work.names)
        if not on_gpu and tgt is not e:
            # an outer composite (aten::linear) around traced ops: charge those their own time
            _charge_inner_cpu(e, work, per_target, order, unattributed)
            continue
        if tgt is None:
            name = canonical(e.name)
            u = unattributed[name]
            u.op, u.time_s = name, u.time_s + dt
            u.kernels = sorted(set(u.kernels) | {k[0] for k in kernels})[:4]
            u.note = "no traced op or Inductor kernel above this kernel"
            continue
        slot = per_target.get(id(tgt))
        if slot is None:
            slot = per_target[id(tgt)] = {"evt": tgt, "time": 0.0, "kernels": [], "spans": []}
            order.append(tgt)
        slot["time"] += dt
        slot["kernels"] += [k[0] for k in kernels]
        slot["spans"] += [k[2] for k in kernels if k[2] is not None]
    matcher = work.matcher(_list_calls(events))  # afresh for each step: every step gets the same attribution
    rows = [_row(per_target[id(t)], work, matcher, scopes) for t in order]
    if dw is not None:
        # kernels with no CPU launch in the profile (another process's, a communication library's)
        if dw.unlinked_us > 0:
            u = unattributed["(kernels with no CPU launch)"]
            u.op, u.time_s = "(kernels with no CPU launch)", dw.unlinked_us * 1e-6
            total += u.time_s
            u.note = "device time the profiler linked to no CPU op (or only to ops that started after it)"
        if stats is not None:
            stats.update(dw.stats())
    rows += [u for u in unattributed.values() if u.time_s > 0]
    return rows, total


def _charge_inner_cpu(top, work: StepWork, per_target: dict, order: list, unattributed: dict) -> None:
    """CPU mode: charge each traced op under a composite its own time; the composite's rest is unattributed."""
    inner = []
    stack = list(top.cpu_children)
    while stack:
        c = stack.pop(0)
        if c.name.startswith("aten::") and canonical(c.name) in work.names:
            inner.append(c)
        else:
            stack[:0] = list(c.cpu_children)
    for c in inner:
        per_target[id(c)] = {"evt": c, "time": c.cpu_time_total * 1e-6, "kernels": []}
        order.append(c)
    rest = top.cpu_time_total * 1e-6 - sum(c.cpu_time_total * 1e-6 for c in inner)
    if rest > 0:
        name = canonical(top.name)
        u = unattributed[name]
        u.op, u.time_s = name, u.time_s + rest
        u.note = "dispatch overhead of a composite op around counted ops" if inner else "no traced op matches"


def _row(slot: dict, work: StepWork, matcher: StepMatcher, scopes: _Scopes) -> OpEvent:
    evt = slot["evt"]
    region = _is_region(evt)
    op = evt.name if region else canonical(evt.name)
    traced, how, flops, nbytes, note = _work(evt, op, matcher)
    chain = _chain(evt)
    sc, backward, in_opt = scopes.of(chain)
    if not sc and traced is not None and traced.module:
        sc = param_scopes(traced.module, work.module_types)
    contains = op if not region else (evt.kwinputs or {}).get("kernel_name", op)
    return OpEvent(
        op=op,
        kind="region" if region else "aten",
        time_s=slot["time"],
        shapes=traced.key if traced is not None else tuple(tuple(s) for s in (evt.input_shapes or []) if s),
        strides=_strides(evt, traced),
        out_shape=tuple(traced.record.outputs[0].shape) if traced is not None and traced.record.outputs else (),
        dtypes=tuple(str(t.dtype).removeprefix("torch.") for t in traced.record.inputs) if traced else (),
        flops=flops,
        bytes=nbytes,
        counted=bool(how) and (traced.count.counted if traced is not None else True),
        match=how,
        scope=sc[0].qualname if sc else "",
        module_type=sc[0].type if sc else "",
        category=category(contains, sc, in_opt),
        layer=layer_of(sc),
        backward=backward,
        kernels=sorted(set(slot["kernels"]))[:4],
        spans=slot.get("spans", []),
        note=note,
    )


def _int_list(x) -> bool:
    return isinstance(x, (list, tuple)) and bool(x) and all(isinstance(v, int) and not isinstance(v, bool) for v in x)


def _strides(evt, traced: TracedOp | None) -> tuple:
    """Strides of the call's tensor arguments, in order: the profiler's where this torch records them (the layouts
    the kernels really got, under torch.compile too), else the meta trace's (the same program on meta tensors)."""
    shapes = getattr(evt, "structured_input_shapes", None) or []
    strides = getattr(evt, "structured_input_strides", None) or []
    out = tuple(tuple(st) for sh, st in zip(shapes, strides) if _int_list(sh) and _int_list(st) and len(sh) == len(st))
    if out or traced is None:
        return out
    return tuple(tuple(t.stride) for t in traced.record.inputs if t.shape)
