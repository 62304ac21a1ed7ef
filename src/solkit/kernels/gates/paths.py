"""What the gated activations' paths need of the device (the capability model,
:mod:`solkit.kernels.common.capability`). GeGLU with bf16 storage takes the hardware tanh (``tanh.approx.f32``
in inline PTX, sm_75 and later) before the portable tanh through the sigmoid; SwiGLU has one plain-Triton path.
Neither has a per-part launch setting (columns per program and warps only)."""

from __future__ import annotations

from solkit.kernels.common.capability import Needs

_TRITON = ("triton", Needs(note="plain Triton"))
_FAST_TANH = ("fast_tanh", Needs(min_cc=75, note="tanh.approx.f32 (bf16 storage)"))

#: Kernel (launcher direction) -> its paths, fastest first; the portable path last.
PATHS: dict[str, tuple[tuple[str, Needs], ...]] = {
    "swiglu_fwd": (_TRITON,),
    "swiglu_bwd": (_TRITON,),
    "geglu_fwd": (_FAST_TANH, _TRITON),
    "geglu_bwd": (_FAST_TANH, _TRITON),
}
