"""What each cross-entropy path needs of the device (the capability model, :mod:`solkit.kernels.common.capability`).

Fastest first: the packed split-row kernels (``split_skew`` 3-5: 16-bit pair arithmetic in inline PTX, sm_80 and
later; registers capped so that ``split_programs_per_sm`` programs share an SM; their bulk L2 prefetch, sm_90, is
dropped where missing), the plain split-row kernel (``split_skew`` 0, plain Triton), and the two-sweep kernel
(plain Triton: softcap, forward-only calls, and rows whose split grid cannot be resident). The fused linear
cross-entropy runs the same row kernels on each chunk of logits (its GEMMs are torch's).
"""

from __future__ import annotations

from solkit.kernels.common import tuned
from solkit.kernels.common.capability import Needs
from solkit.kernels.common.exchange import PAIR_PTX_CC

_LAUNCH = tuned.load("cross_entropy", "launch")
_ROWS = (
    ("packed", Needs(min_cc=PAIR_PTX_CC, max_regs=_LAUNCH["split_maxnreg"], warps=_LAUNCH["split_warps"],
                     note="split rows, one exponential per logit kept packed; bf16x2 PTX")),
    ("split", Needs(note="split rows, plain Triton")),
    ("two_sweep", Needs(note="two sweeps per row, plain Triton")),
)  # fmt: skip

#: Kernel -> its paths, fastest first, each with what it needs; the portable path last.
PATHS: dict[str, tuple[tuple[str, Needs], ...]] = {"cross_entropy": _ROWS, "fused_linear_cross_entropy": _ROWS}
