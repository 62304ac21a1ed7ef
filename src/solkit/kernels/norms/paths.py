"""What each norm kernel path needs of the device (the capability model, :mod:`solkit.kernels.common.capability`).

The forwards are plain Triton (one path each, by width: one row block a program, or the two-pass looped kernel).
The backwards have a TMA kernel (rows as TMA boxes pipelined through shared memory: sm_90's device-side tensor
descriptors, and the shared memory of its stages) before the pointer kernel, which runs everywhere. Its shared
memory in :data:`PATHS` is that of the tuned configuration (LayerNorm, 8192-wide 16-bit rows, ``bwd_tma_stages``);
RMSNorm has no tuned TMA configuration (the path is taken only when asked for) and declares none.
"""

from __future__ import annotations

from solkit.kernels.common import tuned
from solkit.kernels.common.capability import Needs


def tma_smem_bytes(n_cols: int, elem_bytes: int, stages: int) -> int:
    """Shared memory of one TMA backward program: ``stages`` rows of x and dy in flight and the dx row the TMA store
    sends (an upper bound of what Triton's pipeliner allocates)."""
    return (2 * stages + 1) * n_cols * elem_bytes


def tma_needs(smem_bytes: int = 0) -> Needs:
    """What the TMA backward needs: sm_90's tensor descriptors, and ``smem_bytes`` of shared memory."""
    return Needs(min_cc=90, tma=True, smem_bytes=smem_bytes, note="rows as TMA boxes through shared memory")


def _tuned_tma_smem(entry: str) -> int:
    """Shared memory of the TMA backward at ``entry``'s tuned stages (16-bit rows of the width that tunes them)."""
    cfg = tuned.load("norms", entry)
    widths = [w for w, over in cfg.get("by_width", {}).items() if over.get("bwd_tma_stages", 0) > 1]
    stages = [(w, cfg["by_width"][w]["bwd_tma_stages"]) for w in widths]
    return max((tma_smem_bytes(w, 2, s) for w, s in stages), default=0)


_PORTABLE = Needs(note="plain Triton")

#: Kernel (launcher direction) -> its paths, fastest first, each with what it needs; the portable path last.
PATHS: dict[str, tuple[tuple[str, Needs], ...]] = {
    "rmsnorm_fwd": (("triton", _PORTABLE),),
    "add_rmsnorm_fwd": (("triton", _PORTABLE),),
    "rmsnorm_bwd": (("tma", tma_needs(_tuned_tma_smem("rmsnorm"))), ("triton", _PORTABLE)),
    "layernorm_fwd": (("triton", _PORTABLE),),
    "layernorm_bwd": (("tma", tma_needs(_tuned_tma_smem("layernorm"))), ("triton", _PORTABLE)),
}
