"""Device queries every kernel family asks: interpreter or GPU, multiprocessor count, Gluon availability, and
the scratch Triton's device-side tensor descriptors live in."""

from __future__ import annotations

import functools
import os

import torch
import triton


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


@functools.cache
def _sm_count_of_index(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def cuda_sm_count(device: torch.device | int | None = None) -> int:
    """Multiprocessors of a CUDA device: an index, a ``torch.device`` or None (the current device). Cached."""
    if isinstance(device, torch.device):
        device = device.index
    return _sm_count_of_index(device if device is not None else torch.cuda.current_device())


def sm_count(t: torch.Tensor) -> int:
    """Multiprocessors of ``t``'s device (4 on the CPU, so interpreter runs still use several programs)."""
    if t.is_cuda:
        return cuda_sm_count(t.device)
    return 4


def descriptor_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Global scratch for device-side tensor descriptors (128 bytes each), from torch's caching allocator: the
    allocator ``triton.set_allocator`` needs before a kernel makes descriptors with ``tl.make_tensor_descriptor``."""
    return torch.empty(size, dtype=torch.int8, device="cuda" if torch.cuda.is_available() else "cpu")


def use_descriptor_scratch() -> None:
    """Set :func:`descriptor_scratch` as Triton's allocator (before a launch of a device-descriptor kernel)."""
    triton.set_allocator(descriptor_scratch)
