"""The precision policy of T_SOL: which math unit a matrix product is charged to.

Two bases, always labelled (``Analysis.precision``, ``"precision"`` in every JSON output):

* ``fastest`` (the default): the fastest unit that the *storage* dtypes and the tolerance allow. A
  reference that upcasts bf16 tensors to fp32 for accuracy (``x.float() @ w.float().t()``) is
  charged at the bf16 tensor-core peak, because a kernel that reads those bf16 tensors and
  multiplies them on bf16 tensor cores (accumulating in fp32) computes the same products: the
  product of two bf16 values is exact in fp32. An fp32 matrix product goes to TF32 where PyTorch
  allows TF32 for matmuls (``torch.backends.cuda.matmul.allow_tf32``), an fp32 convolution where
  cuDNN allows it (``torch.backends.cudnn.allow_tf32``, True by default).
* ``as_written``: the dtype the reference computes in; fp32 matmuls *and* convolutions follow the
  matmul TF32 flag.

The storage dtype of each tensor is followed through the trace as its *origin*
(:func:`annotate_origins`): external inputs, parameters and buffers originate in their own dtype; a
value-preserving op (a cast, a view, a copy, a gather, a concatenation) passes the origin of its
inputs on, narrowed by a downcast (``.to(bfloat16)``); arithmetic passes on the widest origin of its
inputs, but its result is no longer exactly representable there (``exact=False``). A matrix product
whose operands all originate in a narrower dtype than they are computed in is charged at that dtype
when every operand is exact, or when the tolerance (``rtol``) admits rounding to it (``rtol`` at
least the dtype's unit roundoff, 2⁻⁸ for bf16). Bytes do not depend on the policy: storage is storage.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from solkit.errors import SolkitError

PRECISIONS = ("fastest", "as_written")
#: SOL-ExecBench's default relative tolerance (``ToleranceSpec.max_rtol``), used when none is known.
DEFAULT_RTOL = 1e-2

# Narrow to wide; dtypes of one rank (bf16, fp16) have no common narrow unit and join to the next rank.
_RANK: dict[torch.dtype, int] = {torch.float16: 2, torch.bfloat16: 2, torch.float32: 3, torch.float64: 4}
for _n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _n):
        _RANK[getattr(torch, _n)] = 1
_BY_RANK = {3: torch.float32, 4: torch.float64}


def parse_precision(value: str) -> str:
    """``fastest`` / ``as-written`` / ``as_written`` -> the basis name (SolkitError otherwise)."""
    basis = str(value).strip().replace("-", "_")
    if basis not in PRECISIONS:
        raise SolkitError(f"--precision {value!r}: allowed: fastest, as-written")
    return basis


@dataclass(frozen=True)
class Precision:
    """How matrix work is charged: the basis and the framework's TF32 switches."""

    basis: str = "fastest"
    matmul_tf32: bool = False  # torch.backends.cuda.matmul.allow_tf32
    conv_tf32: bool = True  # torch.backends.cudnn.allow_tf32
    rtol: float = DEFAULT_RTOL  # the tolerance narrowing a computed (inexact) operand must fit in

    def __post_init__(self) -> None:
        if self.basis not in PRECISIONS:
            raise SolkitError(f"precision {self.basis!r}: allowed: {', '.join(PRECISIONS)}")

    @classmethod
    def current(
        cls,
        basis: str = "fastest",
        matmul_tf32: bool | None = None,
        conv_tf32: bool | None = None,
        rtol: float | None = None,
    ) -> Precision:
        """The policy with PyTorch's present TF32 switches for whatever is not given."""
        return cls(
            basis=parse_precision(basis),
            matmul_tf32=bool(torch.backends.cuda.matmul.allow_tf32) if matmul_tf32 is None else bool(matmul_tf32),
            conv_tf32=bool(torch.backends.cudnn.allow_tf32) if conv_tf32 is None else bool(conv_tf32),
            rtol=DEFAULT_RTOL if rtol is None else float(rtol),
        )

    def tf32(self, conv: bool) -> bool:
        """Whether fp32 work of this kind may run as TF32 (as written, convolutions follow the matmul switch)."""
        return self.conv_tf32 if conv and self.basis == "fastest" else self.matmul_tf32

    def to_dict(self) -> dict[str, Any]:
        return {"precision": self.basis, "allow_tf32": self.matmul_tf32, "conv_tf32": self.conv_tf32}


@dataclass(frozen=True)
class Origin:
    """The storage dtype a value came from, and whether it is still exactly representable there."""

    dtype: torch.dtype
    exact: bool = True


def unit_roundoff(dtype: torch.dtype) -> float:
    """Half the machine epsilon: the relative error of rounding to ``dtype``."""
    return float(torch.finfo(dtype).eps) / 2


def _join(dtypes: Iterable[torch.dtype]) -> torch.dtype | None:
    """The narrowest dtype all of ``dtypes`` fit in (bf16 and fp16 together: fp32)."""
    best: torch.dtype | None = None
    for d in dtypes:
        if best is None or _RANK.get(d, 9) > _RANK.get(best, 9):
            best = d
        elif d != best and _RANK.get(d, 9) == _RANK.get(best, 9):
            best = _BY_RANK.get(_RANK.get(d, 9) + 1, best)
    return best


def _narrower(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    return a if _RANK.get(a, 9) < _RANK.get(b, 9) else b


def charged_dtype(written: torch.dtype, origins: Iterable[Origin], p: Precision) -> torch.dtype:
    """The dtype a matrix product computed in ``written`` from operands of ``origins`` is charged at."""
    origins = list(origins)
    if p.basis == "as_written" or written not in _RANK or not origins:
        return written
    joined = _join(o.dtype for o in origins)
    if joined is None or joined not in _RANK or _RANK[joined] >= _RANK[written]:
        return written
    if all(o.exact for o in origins) or p.rtol >= unit_roundoff(joined):
        return joined
    return written


def _floating(metas: Iterable[Any]) -> list[Any]:
    return [t for t in metas if t.dtype in _RANK]


def annotate_origins(records: list, value_preserving) -> None:
    """Fill each record's ``origins`` (tensor key -> :class:`Origin` of what it reads and writes), in trace order.

    ``value_preserving(rec)`` says whether an op only moves values (casts, views, copies, gathers).
    A key's origin is the one its latest producer gave it; an unknown key (an external input)
    originates in its own dtype.
    """
    known: dict[int, Origin] = {}

    def origin_of(t) -> Origin:
        o = known.get(t.key)
        return o if o is not None and t.dtype in _RANK else Origin(t.dtype)

    for rec in records:
        ins = {t.key: origin_of(t) for t in rec.inputs}
        floats = [ins[t.key] for t in _floating(rec.inputs)]
        moves = value_preserving(rec)
        for t in rec.outputs:
            o = Origin(t.dtype)
            if t.dtype in _RANK and floats:
                joined = _join(f.dtype for f in floats)
                exact = moves and all(f.exact for f in floats)
                narrow = _narrower(joined, t.dtype) if joined in _RANK else t.dtype
                o = Origin(narrow, exact or narrow == t.dtype)
            known[t.key] = o
        rec.origins = {**ins, **{t.key: known[t.key] for t in rec.outputs}}


def origin(rec, t) -> Origin:
    """The origin of TensorMeta ``t`` as ``rec`` saw it (its own dtype when not annotated)."""
    got = rec.origins.get(t.key)
    return got if got is not None else Origin(t.dtype)
