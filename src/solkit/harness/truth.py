"""The ground truth's files: how the reference process hands its input sets and outputs to the judge.

A large workload's ground truth is GBs (gemma3_swiglu's input sets hold two 151 MB weights each). Copying each
tensor to host memory and then serialising it (``torch.save``) moves every byte twice and touches every page twice.
So the reference process writes each tensor it keeps straight from the device into a file of its own
(:class:`HostCopies`: through a pinned buffer, then ``pwrite`` into the page cache, which in ``/dev/shm`` is
memory) and keeps a private mapping of it as its host copy. The workload's
record (:func:`save_ground_truth`, ``torch.save``) holds a :class:`Mapped` stand-in per such tensor. The judge
(:func:`load_ground_truth`) maps each file privately (``MAP_PRIVATE``: the same pages, no copy) and then deletes the
folders; the mappings keep the memory, now in the judge alone.

Every file is created ``O_EXCL`` with mode 0600 in a private (0700) folder, and never over an existing file. Each
goes to the first folder with room for it (:func:`has_room`), the last folder (on disk) taking whatever the others
have no room for.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from solkit.hardware.detect import available_memory_bytes

#: Memory left free when the ground truth goes to a tmpfs (``/dev/shm``): its files are memory until the judge has
#: mapped them, and the judge stages a further copy for the candidate.
SHM_SPARE = 1 << 30


def has_room(folder: Path, nbytes: int) -> bool:
    """Whether ``nbytes`` more fit in the tmpfs ``folder`` with SHM_SPARE left both there and in memory, where the
    judge then stages another copy for the candidate."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    mem = available_memory_bytes()
    fits_fs = st.f_bavail * st.f_frsize >= nbytes + SHM_SPARE
    return fits_fs and (mem is None or mem >= 2 * nbytes + SHM_SPARE)


def _claimed(folders: list[Path], name: str, nbytes: int):
    """``name`` created empty (mode 0600, never over an existing file) in each folder with room for ``nbytes`` in
    turn, as the caller asks for the next; the last folder whether it has room or not."""
    for k, folder in enumerate(folders):
        last = k == len(folders) - 1
        if not last and not has_room(folder, nbytes):
            continue
        try:
            os.close(os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except OSError:
            if last:
                raise
            continue
        yield folder / name


def _walk(value: Any, leaf) -> Any:
    """``value`` rebuilt through its dicts, lists and tuples with ``leaf`` applied to everything else."""
    if isinstance(value, dict):
        return {k: _walk(v, leaf) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_walk(v, leaf) for v in value)
    return leaf(value)


def nbytes_of(value: Any) -> int:
    """Bytes of the tensors in ``value`` (a tensor, or dicts, lists and tuples of them)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(nbytes_of(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(nbytes_of(v) for v in value)
    return 0


#: Bytes staged per device-to-host copy: a pinned buffer of this size, copied into and written out in turn.
_CHUNK = 64 << 20


@functools.cache
def _staging() -> torch.Tensor:
    return torch.empty(_CHUNK, dtype=torch.uint8, pin_memory=True)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


def _write(fd: int, t: torch.Tensor) -> None:
    """The tensor's bytes (C order) into ``fd``: from a device through a pinned buffer (a full-speed copy, then a
    write() into the page cache; copying into a fresh mapping instead faults in every page, ~1 GB/s on the H200's
    host), from host memory directly."""
    flat = t.contiguous().reshape(-1).view(torch.uint8)
    if flat.device.type == "cpu":
        _pwrite_all(fd, memoryview(flat.numpy()), 0)
        return
    buf = _staging()
    for off in range(0, flat.numel(), _CHUNK):
        k = min(_CHUNK, flat.numel() - off)
        buf[:k].copy_(flat[off : off + k])
        _pwrite_all(fd, memoryview(buf[:k].numpy()), off)


@dataclass(frozen=True)
class Mapped:
    """A tensor left in a file of its own (raw bytes, C order); what the saved record holds instead of it."""

    path: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    def load(self) -> torch.Tensor:
        """The tensor, mapped privately: reads come from the file's pages, a write would copy only its page."""
        raw = torch.from_file(self.path, shared=False, size=self.nbytes, dtype=torch.uint8)
        return raw.view(getattr(torch, self.dtype)).view(self.shape)


class HostCopies:
    """Host copies of one workload's tensors, each written into a file of its own in the first of ``folders`` with
    room for it and mapped back privately. :meth:`stand_ins` then swaps them for their :class:`Mapped` records
    before saving."""

    def __init__(self, folders: list[Path], prefix: str) -> None:
        self.folders, self.prefix = folders, prefix
        self.files: dict[int, Mapped] = {}  # id of a host copy (alive while the workload is) -> its file
        self._held: list[torch.Tensor] = []  # keeps those ids from being reused

    def copy(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` with every tensor replaced by its host copy (scalars and other objects as they are)."""
        return {k: self.tensor(v) if isinstance(v, torch.Tensor) else v for k, v in values.items()}

    def tensor(self, t: torch.Tensor) -> torch.Tensor:
        t = t.detach()
        nbytes = t.numel() * t.element_size()
        if not nbytes or type(t) is not torch.Tensor or t.layout != torch.strided:
            return t.to("cpu", copy=True)  # nothing to map, or no plain buffer to map: saved with the record
        path = self._path(nbytes)
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            _write(fd, t)
        finally:
            os.close(fd)
        mapped = Mapped(str(path), str(t.dtype).removeprefix("torch."), tuple(t.shape), nbytes)
        host = mapped.load()
        self.files[id(host)] = mapped
        self._held.append(host)
        return host

    def _path(self, nbytes: int) -> Path:
        return next(_claimed(self.folders, f"{self.prefix}_t{len(self._held)}.bin", nbytes))

    def stand_ins(self, value: Any) -> Any:
        """``value`` (dicts, lists, tuples) with each host copy of this writer replaced by its Mapped record."""
        return _walk(value, lambda v: self.files.get(id(v), v) if isinstance(v, torch.Tensor) else v)


def save_ground_truth(data: dict[str, Any], folders: list[Path], name: str) -> Path:
    """Save ``data`` as ``name`` (mode 0600, never over an existing file) in the first of ``folders`` with room for
    it; the last one (on disk) takes whatever the others have no room for."""
    for path in _claimed(folders, name, nbytes_of(data)):
        try:
            torch.save(data, path)
            return path
        except (OSError, RuntimeError):  # full after all (a race with other writers): the next folder
            path.unlink(missing_ok=True)
            if path.parent == folders[-1]:
                raise
    raise OSError("no folder for the ground truth")


def load_ground_truth(path: Path | str, mmap: bool) -> dict[str, Any]:
    """A saved record with every Mapped stand-in mapped back; ``mmap``: the record's own tensors mapped too."""
    return _walk(torch.load(path, weights_only=False, mmap=mmap), lambda v: v.load() if isinstance(v, Mapped) else v)
