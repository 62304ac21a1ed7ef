"""What each softmax path needs of the device (the capability model, :mod:`solkit.kernels.common.capability`).

Paths fastest first, the portable one last. The packed, rows and TMA paths run the 16-bit pair arithmetic in inline
PTX (sm_80 and later); the TMA path stages its chunks through shared memory with device-side tensor descriptors
(sm_90 and later); all three cap their registers so that ``per_sm`` programs share an SM. Their bulk L2 prefetch
(sm_90) is dropped, not the path, where it is missing. "portable" is the single-block, split-row and looped kernels
(plain Triton), of which the row width picks one (:mod:`solkit.kernels.softmax.plan`).
"""

from __future__ import annotations

from solkit.kernels.common.capability import Needs
from solkit.kernels.common.exchange import PAIR_PTX_CC, resident_regs
from solkit.kernels.softmax.packed import PACKED_CONFIG, PACKED_DEFAULT
from solkit.kernels.softmax.rows import ROWS_CONFIG, ROWS_DEFAULT
from solkit.kernels.softmax.tma import TMA_CONFIG, TMA_DEFAULT, tma_smem_bytes


def _settings(base: dict, ranges: list) -> list[dict]:
    """The tuned launch settings of a path: its defaults, and each default range's options over them."""
    return [dict(base)] + [{**base, **opts} for _lo, _hi, opts in ranges]


def _regs(configs: list[dict]) -> tuple[int, int]:
    """(registers per thread, warps) of the largest program among ``configs`` (the ``maxnreg`` the launcher sets)."""
    return max(((resident_regs(c["per_sm"], c["num_warps"]), c["num_warps"]) for c in configs),
               key=lambda rw: rw[0] * rw[1])  # fmt: skip


def _packed(direction: str) -> Needs:
    cfg = PACKED_CONFIG[direction]
    configs = _settings(cfg, PACKED_DEFAULT[direction]["ranges"]) + [{**cfg, **w} for w in cfg["by_width"].values()]
    regs, warps = _regs(configs)
    return Needs(min_cc=PAIR_PTX_CC, max_regs=regs, warps=warps, note="register-held chunks; bf16x2 PTX")


_TMA = _settings(TMA_CONFIG, TMA_DEFAULT["ranges"])
_ROWS = _settings(ROWS_CONFIG, ROWS_DEFAULT["ranges"])

#: Kernel (launcher direction) -> its paths, fastest first, each with what it needs; the portable path last.
PATHS: dict[str, tuple[tuple[str, Needs], ...]] = {
    "softmax_fwd": (
        ("tma", Needs(min_cc=90, tma=True, smem_bytes=max(tma_smem_bytes(c["blocks"], c["stages"]) for c in _TMA),
                      max_regs=_regs(_TMA)[0], warps=_regs(_TMA)[1], note="TMA-staged chunks")),
        ("rows", Needs(min_cc=PAIR_PTX_CC, max_regs=_regs(_ROWS)[0], warps=_regs(_ROWS)[1],
                       note="whole rows in registers; bf16x2 PTX")),
        ("packed", _packed("fwd")),
        ("portable", Needs(note="single-block, split-row or looped by width")),
    ),
    "softmax_bwd": (
        ("packed", _packed("bwd")),
        ("portable", Needs(note="single-block, split-row or looped by width")),
    ),
}  # fmt: skip
