"""What the rotary embedding's paths need of the device (the capability model,
:mod:`solkit.kernels.common.capability`): one plain-Triton kernel each way, no feature or per-part setting (its
launch settings depend on the head layout only)."""

from __future__ import annotations

from solkit.kernels.common.capability import Needs

_TRITON = (("triton", Needs(note="plain Triton")),)

#: Kernel (launcher direction) -> its paths, fastest first; the portable path last.
PATHS: dict[str, tuple[tuple[str, Needs], ...]] = {"rope_fwd": _TRITON, "rope_bwd": _TRITON}
