"""The work of every op of a step, from the meta-tensor trace, indexed to meet the profiler's events.

A profiled aten op and a traced one are the same op when their canonical names (in-place suffix
dropped, every scaled-dot-product-attention entry point folded into one forward and one backward
name) and the shapes of their tensor arguments agree. Ops of the same name whose shapes the
profiler reports differently (attention's backward takes other arguments than its forward's
inputs) are matched in order of appearance instead, and the multi-tensor ops (whose tensor lists the
profiler records no shapes for) in program order (:func:`align_list_calls`). Each profiled step is
matched afresh, so every step gets the same attribution.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch

from solkit.model.step import meta_step
from solkit.sol.analysis import analyze
from solkit.sol.counting import OpCount
from solkit.sol.opview import op_views
from solkit.sol.trace import OpRecord, TensorMeta
from solkit.zoo import Built

_ATTN = r"scaled_dot_product\w*attention\w*|flash_attention|efficient_attention|cudnn_attention"
_SDPA_BWD = re.compile(rf"^_?({_ATTN})_backward")
_SDPA_FWD = re.compile(rf"^_?({_ATTN})(_forward)?$")
#: Ops over tensor lists (canonical names): the optimizer's multi-tensor and fused steps.
LIST_OPS = ("_foreach_", "_fused_")
#: Fills sized by an integer list (the profiler's first concrete input), and the place of their dtype argument.
_FILLS = {"zeros": 1, "ones": 1, "full": 2}
#: c10's ScalarType numbering, as the profiler records a dtype argument.
_SCALAR_TYPES = (
    *(torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32, torch.float64),
    *(None, torch.complex64, torch.complex128, torch.bool, None, None, None, torch.bfloat16),
)


def canonical(name: str) -> str:
    """An aten op name as both sides are matched on: no namespace, no in-place suffix, attention folded."""
    name = name.split("::")[-1].split(".")[-1] if "::" in name else name
    if _SDPA_BWD.match(name):
        return "scaled_dot_product_attention_backward"
    if _SDPA_FWD.match(name):
        return "scaled_dot_product_attention"
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


def shape_key(shapes: list[Any]) -> tuple[tuple[int, ...], ...]:
    """The profiler's ``input_shapes`` as a key: the non-scalar tensor shapes, in order (tensor lists flattened)."""
    out: list[tuple[int, ...]] = []

    def visit(x: Any) -> None:
        if isinstance(x, (list, tuple)) and x:
            if all(isinstance(v, int) and not isinstance(v, bool) for v in x):
                out.append(tuple(x))
            else:
                for v in x:
                    visit(v)

    for s in shapes:
        visit(s)
    return tuple(out)


def record_key(rec: OpRecord) -> tuple[tuple[int, ...], ...]:
    """The same key for a traced op: the shapes of its tensor arguments (integer lists such as a stride are not)."""
    out: list[tuple[int, ...]] = []

    def visit(x: Any) -> None:
        if isinstance(x, TensorMeta):
            if x.shape:
                out.append(tuple(x.shape))
        elif isinstance(x, (list, tuple)):
            for v in x:
                visit(v)

    for v in rec.args.values():
        visit(v)
    return tuple(out)


@dataclass
class TracedOp:
    """One traced call: its record (shapes, dtypes) and its count (FLOPs by unit, bytes)."""

    record: OpRecord
    count: OpCount
    name: str  # canonical
    key: tuple
    module: str = ""  # qualified name of the module whose parameter it reads first ("" for none)


class StepWork:
    """Every traced op of a step; :meth:`matcher` gives one profiled step's lookup of them."""

    def __init__(self, ops: list[TracedOp], module_types: dict[str, str] | None = None):
        self.ops = ops
        self.module_types = module_types or {}  # qualified name -> class name, for scopes from parameters
        self.names = {o.name for o in ops} | set(_FILLS)  # a fill is charged its output even with no traced twin
        self.by_key: dict[tuple, list[TracedOp]] = defaultdict(list)
        self.by_name: dict[str, list[TracedOp]] = defaultdict(list)
        for o in ops:
            self.by_key[(o.name, o.key)].append(o)
            self.by_name[o.name].append(o)

    def matcher(self, list_calls: list[tuple[Any, str, list[Any]]] = ()) -> StepMatcher:
        """A fresh lookup for one profiled step (every step starts from the first call of each name), with the
        step's multi-tensor calls ``(event, name, input_shapes)`` in program order aligned to the traced ones."""
        return StepMatcher(self, list_calls)


def _list_fits(call: tuple[str, tuple], traced: TracedOp) -> bool:
    name, shapes_key = call
    return name == traced.name and (not shapes_key or traced.key in (shapes_key, shapes_key[:-1]))


def align_list_calls(profiled: list[tuple[str, tuple]], traced: list[TracedOp]) -> list[int | None]:
    """For a step's profiled multi-tensor calls (name and shape key each, in program order), the index of the traced
    call each one is (``traced``: the traced multi-tensor calls, in program order too), or None.

    The profiler records no shapes for tensor lists, so program order is the key: the k-th profiled call is the k-th
    traced call, except that the trace may hold calls the measured step did not launch. The traced optimizer is built
    ``capturable`` (:func:`solkit.model.step.trace_twin`): its bias corrections are multi-tensor ops over 0-dim
    tensors that the measured (non-capturable) step computes as Python floats, and it divides by the step size apart.
    The alignment keeps program order on both sides (across names, so each parameter group's calls stay with that
    group's) and, among the orders that match the most profiled calls, skips 0-dim traced calls rather than calls over
    parameters and state: the measured ``_foreach_sqrt`` of exp_avg_sq is the traced one over exp_avg_sq, not the one
    over the 0-dim bias corrections before it. It depends only on the two sequences: each profiled step of the same
    program gets the same answer.
    """
    n, m = len(profiled), len(traced)
    big = m + 1  # a matched call outweighs any number of sized-over-scalar preferences

    def gain(i: int, j: int) -> int:
        return big + (1 if traced[j].key else 0) if _list_fits(profiled[i], traced[j]) else -1

    # best[i][j]: the best score aligning profiled[i:] with traced[j:]
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            g = gain(i, j)
            best[i][j] = max(best[i + 1][j + 1] + g if g > 0 else -1, best[i][j + 1], best[i + 1][j])
    out: list[int | None] = [None] * n
    i = j = 0
    while i < n and j < m:
        g = gain(i, j)
        if g > 0 and best[i][j] == best[i + 1][j + 1] + g:
            out[i] = j
            i, j = i + 1, j + 1
        elif best[i][j] == best[i][j + 1]:
            j += 1
        else:
            i += 1
    return out


class StepMatcher:
    """One profiled step's lookup: a profiled call meets its traced call by (name, shapes), by order within its
    name where shapes do not tell, and a multi-tensor call by :func:`align_list_calls`."""

    def __init__(self, work: StepWork, list_calls: list[tuple[Any, str, list[Any]]] = ()):
        self.work = work
        self._next_key: dict[tuple, int] = defaultdict(int)
        self._next_name: dict[str, int] = defaultdict(int)
        self._lists: dict[int, TracedOp | None] = {}  # id(event) -> its traced call
        traced = [o for o in work.ops if o.name.startswith(LIST_OPS)]
        calls = [(name, shape_key(shapes)) for _, name, shapes in list_calls]
        for (evt, _, _), j in zip(list_calls, align_list_calls(calls, traced)):
            self._lists[id(evt)] = traced[j] if j is not None else None

    def match(self, name: str, shapes: list[Any], evt: Any = None) -> tuple[TracedOp | None, str]:
        """The traced op for a profiled call (``evt``: its event), and how it was found ("shapes", "order" or "")."""
        if evt is not None and id(evt) in self._lists:
            hit = self._lists[id(evt)]
            return (hit, "order") if hit is not None else (None, "")
        shapes_key = shape_key(shapes)
        if not shapes_key and name in _FILLS:
            fill = self._fill(name, evt)
            if fill is not None:
                return fill
        # an out= variant (Inductor's extern_kernels.mm(a, b, out=buf)) lists its output last
        for key in ((name, shapes_key), (name, shapes_key[:-1])):
            hits = self.work.by_key.get(key)
            if hits:
                i = self._next_key[key]
                self._next_key[key] = i + 1
                return hits[i % len(hits)], "shapes"
        same = self.work.by_name.get(name)
        if same:
            i = self._next_name[name]
            self._next_name[name] = i + 1
            return same[i % len(same)], "order"
        return None, ""

    def _fill(self, name: str, evt: Any) -> tuple[TracedOp, str] | None:
        """A fill (``zeros``, ``ones``, ``full``) has no tensor argument: it meets a traced fill of the size the
        profiler recorded, else (a buffer Inductor zeroes that the eager trace has no twin of) it is charged what it
        writes, its output."""
        args = list(getattr(evt, "concrete_inputs", None) or [])
        size = args[0] if args else None
        if not isinstance(size, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in size):
            return None
        key = (name, ("size", tuple(size)))
        hits = [
            o for o in self.work.by_name.get(name, []) if o.record.outputs and o.record.outputs[0].shape == key[1][1]
        ]
        if hits:
            i = self._next_key[key]
            self._next_key[key] = i + 1
            return hits[i % len(hits)], "shapes"
        code = args[_FILLS[name]] if len(args) > _FILLS[name] else None
        dtype = _SCALAR_TYPES[code] if isinstance(code, int) and 0 <= code < len(_SCALAR_TYPES) else None
        dtype = dtype or (torch.get_default_dtype() if code is None else None)
        if dtype is None:
            return None
        out = TensorMeta(tuple(size), dtype, ())
        numel = 1
        for d in size:
            numel *= d
        note = "no traced twin: charged the output it writes, at the size the profiler recorded"
        count = OpCount(f"aten.{name}", {}, numel * dtype.itemsize, note=note)
        return TracedOp(OpRecord(name, "aten", "default", [], [out], {}), count, name, ()), "size"


def _owner(name: str, params: list[str], buffers: list[str]) -> str:
    """The module owning a boundary tensor named ``arg0.<i>`` (the i-th parameter) or ``arg1.<i>`` (buffer)."""
    head, _, index = name.partition(".")
    names = {"arg0": params, "arg1": buffers}.get(head)
    if names is None or not index.isdigit() or int(index) >= len(names):
        return ""
    return names[int(index)].rpartition(".")[0]


def step_work(built: Built, mode: str, precision: str | None = None, opt: Any = None) -> StepWork:
    """Trace one step of ``built`` in ``mode`` on meta tensors and count every op (on ``precision``'s basis;
    ``opt``: the measured step's optimizer, traced as its twin on meta tensors).

    Each op also learns the module whose parameters it reads (``OpView.reads``): the module scope of
    ops that the profile shows without one (a compiled graph's extern GEMMs).
    """
    fn, args = meta_step(built, mode, opt)
    a = analyze(fn, *args, precision=precision or "fastest")
    params, buffers = list(args[0]), list(args[1])
    ops = []
    for rec, c, view in zip(a.trace.records, a.calls, op_views(a)):
        owner = next((o for o in (_owner(b.name, params, buffers) for b in view.reads) if o), "")
        ops.append(TracedOp(rec, c, canonical(rec.name), record_key(rec), owner))
    types = {name: type(m).__name__ for name, m in built.model.named_modules()}
    return StepWork(ops, types)
