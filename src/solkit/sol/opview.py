"""The per-op view of an analysis, and the boundary bytes of any group of ops.

:func:`op_views` gives one :class:`OpView` per traced op call, in order: its FLOPs by unit, its
op-by-op bytes (everything it reads and writes, the parameters it reads included) and the boundary
tensors it reads, seen through views (a ``linear``'s ``mm`` reads ``fc.weight`` through ``t``), so a
caller can attribute work and weights to the operator that read them.

:func:`region_bytes` is the fused-bytes rule applied to a group of ops (an Inductor fused region, a
module's ops): each tensor the group reads but did not produce is read once, and each tensor it
produces that something outside the group (a later op, the call's outputs) reads is written once.
Applied to every op of a call it gives the call's fused bytes, less inputs no op reads.

Tensors are followed by their trace key; a key can be reused after its tensor is freed, so every
walk goes in trace order and takes a key's latest producer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from solkit.sol.trace import BoundaryTensor, OpRecord, OpTrace, TensorMeta

# A tensor version: (key, index of the record that produced it, or -1 for a boundary input).
Version = tuple[int, int]


@dataclass
class OpView:
    """One op call: its work, and the boundary tensors (parameters by name) it reads."""

    index: int  # position in ``Analysis.calls`` / ``Analysis.trace.records``
    op: str  # "aten.addmm", "solkit.scaled_dot_product_attention"
    flops: dict[str, int]
    unit: str  # the unit doing most of its FLOPs ("" for data movement)
    bytes: int  # what this op reads and writes on its own (views move nothing)
    reads: list[BoundaryTensor] = field(default_factory=list)  # boundary inputs read, through views
    counted: bool = True
    note: str = ""
    is_view: bool = False

    @property
    def parameter_bytes(self) -> int:
        """Bytes of the parameters and buffers this op reads (each once)."""
        return sum(b.meta.nbytes for b in self.reads if b.kind in ("parameter", "buffer"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "op": self.op,
            "flops": dict(self.flops),
            "unit": self.unit,
            "bytes": self.bytes,
            "reads": [{"name": b.name, "kind": b.kind, "bytes": b.meta.nbytes} for b in self.reads],
            "counted": self.counted,
            "note": self.note,
        }


class _Walk:
    """Follows tensor versions through a trace: who produced each key, and what a view aliases."""

    def __init__(self, tr: OpTrace) -> None:
        self.tr = tr
        self.current: dict[int, Version] = {b.key: (b.key, -1) for b in tr.boundary}
        self.base: dict[Version, Version] = {}  # a view's version -> the version it aliases
        self.metas: dict[Version, TensorMeta] = {(b.key, -1): b.meta for b in tr.boundary}

    def version(self, key: int, meta: TensorMeta) -> Version:
        v = self.current.get(key)
        if v is None:  # read but never produced nor passed in (a one-element literal): its own version
            v = self.current[key] = (key, -2)
            self.metas[v] = meta
        return v

    def root(self, v: Version) -> Version:
        while v in self.base:
            v = self.base[v]
        return v

    def step(self, i: int, rec: OpRecord) -> tuple[list[Version], list[Version]]:
        """The root versions ``rec`` reads, then the versions it writes (after recording them)."""
        reads = [self.root(self.version(k, m)) for k, m in zip(rec.input_ids, rec.inputs)]
        written = []
        for k, m in zip(rec.output_ids, rec.outputs):
            old = self.current.get(k)
            if k in rec.written_ids and old is not None:  # in place: the same tensor, now written by rec
                written.append(self.root(old))
                continue
            v = (k, i)
            self.current[k] = v
            self.metas[v] = m
            if rec.is_view and reads:
                self.base[v] = reads[0]
            else:
                written.append(v)
        return reads, written


def op_views(analysis: Any) -> list[OpView]:
    """One :class:`OpView` per op call of ``analysis`` (an :class:`~solkit.sol.analysis.Analysis`)."""
    tr = analysis.trace
    if tr is None:
        return []
    walk = _Walk(tr)
    by_version = {(b.key, -1): b for b in tr.boundary}
    out = []
    for i, (rec, c) in enumerate(zip(tr.records, analysis.calls)):
        reads, _ = walk.step(i, rec)
        seen = list(dict.fromkeys(v for v in reads if v in by_version))
        boundary = [by_version[v] for v in seen]
        out.append(OpView(i, c.op, dict(c.flops), c.unit, c.bytes, boundary, c.counted, c.note, rec.is_view))
    return out


def region_bytes(tr: OpTrace, indices: Iterable[int]) -> int:
    """Bytes crossing the boundary of the ops at ``indices`` of ``tr.records`` (see the module docstring)."""
    region = set(indices)
    walk = _Walk(tr)
    read_in: dict[Version, int] = {}
    produced: dict[Version, int] = {}
    needed_outside: set[Version] = set()
    for i, rec in enumerate(tr.records):
        reads, written = walk.step(i, rec)
        if i in region:
            for v in reads:
                if v not in produced:
                    read_in.setdefault(v, walk.metas[v].nbytes)
            for v in written:
                produced[v] = walk.metas[v].nbytes
        else:
            needed_outside.update(v for v in reads if v in produced)
    final = {walk.root(walk.current[t.key]) for t in tr.outputs if t.key in walk.current}
    final |= {walk.root(walk.current[b.key]) for b in tr.written if b.key in walk.current}
    out_bytes = sum(n for v, n in produced.items() if v in needed_outside or v in final)
    return sum(read_in.values()) + out_bytes
