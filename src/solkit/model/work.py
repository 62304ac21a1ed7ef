"""The work of every op of a step, from the meta-tensor trace, indexed to meet the profiler's events.

A profiled aten op and a traced one are the same op when their canonical names (in-place suffix
dropped, every scaled-dot-product-attention entry point folded into one forward and one backward
name) and the shapes of their tensor arguments agree. Ops of the same name whose shapes the
profiler reports differently (attention's backward takes other arguments than its forward's
inputs) are matched in order of appearance instead.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

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
    """Every traced op of a step, looked up by (name, shapes) and, failing that, by name in order."""

    def __init__(self, ops: list[TracedOp], module_types: dict[str, str] | None = None):
        self.ops = ops
        self.module_types = module_types or {}  # qualified name -> class name, for scopes from parameters
        self.names = {o.name for o in ops}
        self._by_key: dict[tuple, list[TracedOp]] = defaultdict(list)
        self._by_name: dict[str, list[TracedOp]] = defaultdict(list)
        for o in ops:
            self._by_key[(o.name, o.key)].append(o)
            self._by_name[o.name].append(o)
        self._next_key: dict[tuple, int] = defaultdict(int)
        self._next_name: dict[str, int] = defaultdict(int)
        self._sized: dict[str, list[TracedOp]] = defaultdict(list)  # multi-tensor ops over non-scalar tensors
        for o in ops:
            if o.name.startswith(LIST_OPS) and o.key:
                self._sized[o.name].append(o)
        self._next_sized: dict[str, int] = defaultdict(int)

    def match(self, name: str, shapes: list[Any]) -> tuple[TracedOp | None, str]:
        """The traced op for a profiled call, and how it was found ("shapes", "order" or "")."""
        shapes_key = shape_key(shapes)
        if not shapes_key and self._sized.get(name):
            # The profiler records no shapes for tensor lists. The calls over parameters, gradients and
            # optimizer state come first; on a GPU the calls over scalar step counters either run on the
            # CPU (no kernel, never profiled here) or have no sized twin (a fused step's counter update).
            i = self._next_sized[name]
            if i < len(self._sized[name]):
                self._next_sized[name] = i + 1
                return self._sized[name][i], "order"
        # an out= variant (Inductor's extern_kernels.mm(a, b, out=buf)) lists its output last
        for key in ((name, shapes_key), (name, shapes_key[:-1])):
            hits = self._by_key.get(key)
            if hits:
                i = self._next_key[key]
                self._next_key[key] = i + 1
                return hits[i % len(hits)], "shapes"
        same = self._by_name.get(name)
        if same:
            i = self._next_name[name]
            self._next_name[name] = i + 1
            return same[i % len(same)], "order"
        return None, ""


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
