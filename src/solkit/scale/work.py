"""What a pool runs: items (a picklable call each), what comes back, and files that travel by value.

A :class:`Call` names a module-level function and its arguments; it is pickled by reference, so the
worker imports the function's module itself (a worker on another Ray node needs solkit installed, never
the caller's files). A :class:`Bundle` carries a directory's files as bytes (a problem directory, a
solution), so nothing assumes a shared filesystem; a worker unpacks it once (:func:`unpacked`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError


@dataclass(frozen=True)
class Call:
    """``fn(*args, **kwargs)``, with ``fn`` a module-level function (pickled by reference)."""

    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self) -> Any:
        return self.fn(*self.args, **self.kwargs)


@dataclass(frozen=True)
class Item:
    """One unit of work; ``key`` names it in messages, e.g. ``("rmsnorm", "<workload uuid>")``."""

    key: tuple[str, ...]
    call: Call


@dataclass
class Outcome:
    """What became of item ``index``: its value, or the one-line error that stopped it."""

    index: int
    key: tuple[str, ...]
    ok: bool
    value: Any = None
    error: str | None = None
    device: dict[str, Any] = field(default_factory=dict)  # the identity of the device it ran on
    worker: str = ""  # the worker's label (cuda:3, cpu#1, a Ray actor's node and GPU)
    attempts: int = 1
    seconds: float = 0.0


@dataclass(frozen=True)
class Bundle:
    """The files of a directory (relative path -> bytes), named by a digest of their content."""

    name: str
    files: tuple[tuple[str, bytes], ...]
    digest: str


#: A bundle larger than this is refused: problems carry definitions, workloads and solutions, not data sets.
MAX_BUNDLE_BYTES = 512 * 2**20


def pack(directory: str | Path, pattern: str = "**/*") -> Bundle:
    """Read every file under ``directory`` (hidden files and ``__pycache__`` left out) into a :class:`Bundle`."""
    root = Path(directory)
    if not root.is_dir():
        raise SolkitError(f"{root}: not a directory")
    files, total, h = [], 0, hashlib.sha256()
    for p in sorted(root.glob(pattern)):
        rel = p.relative_to(root)
        if not p.is_file() or any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        data = p.read_bytes()
        total += len(data)
        if total > MAX_BUNDLE_BYTES:
            raise SolkitError(f"{root}: more than {MAX_BUNDLE_BYTES >> 20} MiB of files; too large to send to workers")
        files.append((rel.as_posix(), data))
        h.update(rel.as_posix().encode() + b"\0" + hashlib.sha256(data).digest())
    return Bundle(name=root.name, files=tuple(files), digest=h.hexdigest()[:20])


_UNPACKED: dict[str, Path] = {}


def unpacked(source: str | Path | Bundle) -> Path:
    """A directory holding ``source``: a path as it is, a bundle written once per process under a temp dir."""
    if not isinstance(source, Bundle):
        return Path(source)
    done = _UNPACKED.get(source.digest)
    if done is not None and done.is_dir():
        return done
    base = Path(tempfile.mkdtemp(prefix=f"solkit_scale_{source.digest[:8]}_")) / source.name
    for rel, data in source.files:
        dest = (base / rel).resolve()
        if base.resolve() not in dest.parents:  # a bundle never writes outside its directory
            raise SolkitError(f"bundle {source.name}: path {rel!r} leaves the directory")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    _UNPACKED[source.digest] = base
    return base


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message``, at most 300 characters."""
    text = str(exc).strip()
    return (f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__)[:300]


@dataclass
class WorkerState:
    """What a running item may ask of its worker: its torch device, the device's identity, the setup's value."""

    device: str
    identity: dict[str, Any]
    setup: Any = None
    label: str = ""


_STATE: list[WorkerState] = []


def worker_state() -> WorkerState | None:
    """The state of the pool worker this code runs in, or None outside a pool (a serial run)."""
    return _STATE[0] if _STATE else None


def enter_worker(state: WorkerState) -> None:
    _STATE[:] = [state]


def injected_kill(label: str, incarnation: int) -> int | None:
    """For tests only: ``SOLKIT_SCALE_TEST_KILL=<worker label>:<n>`` makes that worker kill itself (SIGKILL)
    when its ``n``-th item arrives, in its first incarnation. Honoured only under pytest."""
    spec = os.environ.get("SOLKIT_SCALE_TEST_KILL", "")
    if not spec or not os.environ.get("PYTEST_CURRENT_TEST") or incarnation:
        return None
    who, _, n = spec.rpartition(":")
    with contextlib.suppress(ValueError):
        return int(n) if who == label else None
    return None
