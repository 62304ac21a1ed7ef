"""Device queries every kernel family asks: interpreter or GPU, multiprocessor count, Gluon availability."""

from __future__ import annotations

import os

import torch


def interpreting() -> bool:
    """True when Triton kernels run through the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def gluon_unavailable_reason(
    import_error: str | None, device: torch.device | None = None, interpreter_blocks: bool = True
) -> str | None:
    """Why a Gluon kernel cannot run on ``device`` (default: the current CUDA device), or None if it can:
    ``import_error`` (the kernel module's failed Gluon import, if any), the interpreter (which does not run
    Gluon; ``interpreter_blocks``), no CUDA device, or a device other than Hopper (sm_90)."""
    if import_error is not None:
        return f"triton.experimental.gluon not importable ({import_error})"
    if interpreter_blocks and interpreting():
        return "the Triton interpreter does not run Gluon"
    if not torch.cuda.is_available():
        return "no CUDA device"
    capability = torch.cuda.get_device_capability(device)
    if capability != (9, 0):
        return f"needs sm_90, device is sm_{''.join(map(str, capability))}"
    return None


def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(t: torch.Tensor) -> int:
    """Multiprocessors of ``t``'s device (4 on the CPU, so interpreter runs still use several programs)."""
    if t.is_cuda:
        return _sm_count(t.device.index if t.device.index is not None else torch.cuda.current_device())
    return 4
