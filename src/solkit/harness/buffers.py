"""Buffers the judge allocates and the candidate process maps.

Each buffer is a file in the candidate's scratch directory. The candidate process maps it ``MAP_SHARED``
(``torch.from_file(shared=True)``); the judge writes the inputs and reads the outputs with ``pwrite``/``pread``
on its own descriptor (:class:`Buffer`), so the values it compares never pass through anything the candidate
process sends. The judge does not map the files: a candidate that truncates one would make a mapped read fault
(``SIGBUS``) in the judge, while a read comes back short, which the judge reports. A spec (``{"buf": path,
"dtype": name, "shape": [...]}``) names a buffer in a command; a scalar argument travels by value
(``{"value": v}``).
"""

from __future__ import annotations

import contextlib
import os
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


class TruncatedBuffer(Exception):
    """A buffer file is shorter than the buffer: something truncated it."""


class Buffer:
    """The judge's side of one buffer file: whole-buffer reads and writes through a descriptor."""

    def __init__(self, path: Path, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
        self.path, self.dtype, self.shape = path, dtype, tuple(int(s) for s in shape)
        numel = 1
        for s in self.shape:
            numel *= s
        self.numel = numel
        self.nbytes = numel * torch.empty((), dtype=dtype).element_size()
        self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)

    def write(self, values: torch.Tensor) -> None:
        raw = values.detach().to("cpu", self.dtype).contiguous().reshape(-1).view(torch.uint8)
        data, done = memoryview(raw.numpy()), 0
        while done < len(data):
            done += os.pwrite(self.fd, data[done:], done)

    def read(self) -> torch.Tensor:
        out = bytearray(self.nbytes)
        view, done = memoryview(out), 0
        while done < self.nbytes:
            n = os.preadv(self.fd, [view[done:]], done)
            if n <= 0:
                raise TruncatedBuffer(f"{self.path.name}: {done} of {self.nbytes} bytes")
            done += n
        if not self.nbytes:
            return torch.empty(self.shape, dtype=self.dtype)
        return torch.frombuffer(out, dtype=torch.uint8).view(self.dtype).view(self.shape)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def create(path: Path, dtype: torch.dtype, shape: tuple[int, ...]) -> tuple[Buffer, dict[str, Any]]:
    """A new zero-filled buffer file and the judge's handle on it; returns (buffer, spec)."""
    numel = 1
    for s in shape:
        numel *= int(s)
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    with open(path, "wb") as f:
        f.truncate(max(nbytes, 1))
    spec = {"buf": str(path), "dtype": str(dtype).removeprefix("torch."), "shape": [int(s) for s in shape]}
    return Buffer(path, dtype, tuple(shape)), spec


def open_spec(spec: dict[str, Any]) -> torch.Tensor:
    """The candidate side's mapping of a buffer named in a command."""
    return _map(Path(spec["buf"]), dtype_of(spec["dtype"]), tuple(int(s) for s in spec["shape"]))
