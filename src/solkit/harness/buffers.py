"""Buffers the judge allocates and the candidate process maps.

Each buffer is a file in the candidate's scratch directory, mapped ``MAP_SHARED`` on both sides
(``torch.from_file(shared=True)``): the judge writes the inputs and reads the outputs through its own
mapping, so the values it compares never pass through anything the candidate process sends. A spec
(``{"buf": path, "dtype": name, "shape": [...]}``) names a buffer in a command; a scalar argument
travels by value (``{"value": v}``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def dtype_of(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


def _map(path: Path, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    numel = 1
    for s in shape:
        numel *= int(s)
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    raw = torch.from_file(str(path), shared=True, size=max(nbytes, 1), dtype=torch.uint8)
    return raw[:nbytes].view(dtype).view(shape)


def create(path: Path, dtype: torch.dtype, shape: tuple[int, ...]) -> tuple[torch.Tensor, dict[str, Any]]:
    """A new zero-filled buffer file and the judge's mapping of it; returns (tensor, spec)."""
    numel = 1
    for s in shape:
        numel *= int(s)
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    with open(path, "wb") as f:
        f.truncate(max(nbytes, 1))
    spec = {"buf": str(path), "dtype": str(dtype).removeprefix("torch."), "shape": [int(s) for s in shape]}
    return _map(path, dtype, tuple(shape)), spec


def open_spec(spec: dict[str, Any]) -> torch.Tensor:
    """The candidate side's mapping of a buffer named in a command."""
    return _map(Path(spec["buf"]), dtype_of(spec["dtype"]), tuple(int(s) for s in spec["shape"]))
