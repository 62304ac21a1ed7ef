"""Starting the sandboxed candidate process, without torch in the judge.

``solkit eval`` starts the candidate (:mod:`.serve`: Python, torch, its sandbox) before the judge imports torch
itself, so the three start-ups (judge, reference, candidate) run at the same time. The process starts exactly as
:class:`solkit.harness.process.CandidateProcess` would start it, from the same job; the judge adopts it only when
that job is the one it would have written (:func:`candidate_job`), else it discards it and starts its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solkit.harness import languages, sandbox


def candidate_job(job: dict[str, Any], base: Path, n: int) -> tuple[dict[str, Any], Path]:
    """The job file of the ``n``-th candidate process of an evaluation and its scratch directory (made here)."""
    plan = job.get("sandbox_plan") or {}
    settings = ({"landlock_abi": plan.get("landlock_abi", 0), "nofile": 4096, "file_size": 32 << 30,
                 "address_space": plan.get("address_space")} if plan.get("enabled") else None)  # fmt: skip
    scratch = base / f"candidate{n}"
    scratch.mkdir(parents=True, exist_ok=True)
    cjob = {"solution": job["solution"], "device": job["device"], "scratch": str(scratch), "sandbox": settings,
            "cpu_threads": job.get("cpu_threads"), "method": job.get("method"),
            "include_dirs": languages.cutlass_include_dirs(),
            "interpret_triton": bool(job.get("interpret_triton"))}  # fmt: skip
    return cjob, scratch


@dataclass
class Spawned:
    """A started candidate process whose hello has not been read yet."""

    popen: subprocess.Popen
    fd: int  # the reply pipe's read end (non-blocking)
    marker: str  # its environment marker (descendants found through /proc)
    log_path: Path
    job: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)  # the containment it was started under
    spawned_at: float = field(default_factory=time.time)
    adopted: bool = False  # a CandidateProcess owns it now (and closes it)
    discarded: bool = False

    def discard(self) -> None:
        """Kill it and every descendant (it was started for a job the judge did not run)."""
        if self.adopted or self.discarded:
            return
        self.discarded = True
        terminate(self.popen, self.fd, self.marker)


def terminate(popen: subprocess.Popen, fd: int, marker: str) -> int:
    """Kill a candidate process, its process group and every descendant, and close its pipes; returns how many
    stragglers the /proc scan found."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    stragglers = sandbox.kill_tree(popen.pid, marker)
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(timeout=10)
    with contextlib.suppress(OSError):
        os.close(fd)
    with contextlib.suppress(OSError):
        popen.stdin.close()
    return stragglers


def _env(scratch: Path, marker: str, interpret_triton: bool = False) -> dict[str, str]:
    env = sandbox.child_env(scratch, marker, sandbox.import_path())
    if interpret_triton:  # decided per evaluation (a CPU run of Triton code), never through this process's own env
        env["TRITON_INTERPRET"] = "1"
    return env


def adoptable(spawned: Spawned | None, job: dict[str, Any], scratch: Path, plan: dict[str, Any]) -> bool:
    """Whether ``spawned`` started from exactly this job, under this containment plan, with the environment the
    judge would give it now."""
    if spawned is None or spawned.popen.poll() is not None:
        return False
    now = {k: v for k, v in _env(scratch, "", job.get("interpret_triton")).items() if k != sandbox.MARKER}
    same = spawned.job == job and spawned.plan == plan and spawned.env == now
    return same and spawned.log_path.parent == scratch


def spawn_candidate(job: dict[str, Any], scratch: Path, plan: dict[str, Any]) -> Spawned:
    """Start ``python -m solkit.harness.serve`` for ``job`` in ``scratch``, contained as ``plan`` says."""
    marker = secrets.token_hex(8)
    log_path = scratch / "candidate.log"
    job_path = scratch / "job.json"
    job_path.write_text(json.dumps(job))
    read_fd, write_fd = os.pipe()
    env = _env(scratch, marker, job.get("interpret_triton"))
    cmd = [*sandbox.command_prefix(plan), sys.executable, "-m", "solkit.harness.serve", str(job_path)]
    with open(log_path, "wb") as log:
        popen = subprocess.Popen([*cmd, str(write_fd)], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                 pass_fds=(write_fd,), env=env, cwd=scratch, start_new_session=True)  # fmt: skip
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    return Spawned(popen, read_fd, marker, log_path, job, {k: v for k, v in env.items() if k != sandbox.MARKER},
                   dict(plan))  # fmt: skip


def device_guess(device: str | None) -> str:
    """``--device`` without torch: auto is cuda:0 where an NVIDIA driver and a visible device are (the judge checks
    with torch later, and a candidate started for the wrong device is discarded)."""
    if device in ("auto", "", None):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return "cuda:0" if Path("/dev/nvidiactl").exists() and visible not in ("", "-1") else "cpu"
    return "cuda:0" if device == "cuda" else str(device)


@dataclass
class Ahead:
    """The candidate process started before this process imports torch, for the device guessed without it."""

    device: str
    plan: dict[str, Any]
    work_dir: str
    spawned: Spawned


def ready(spawned: Spawned) -> bool:
    """Whether a started candidate process has finished starting: its hello is on the reply pipe (left there for
    the judge that adopts it), or it has exited."""
    if spawned.adopted or spawned.discarded or spawned.popen.poll() is not None:
        return True
    readable, _, _ = select.select([spawned.fd], [], [], 0)
    return bool(readable)
