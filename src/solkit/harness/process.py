"""The candidate process as the judge drives it: one request and its reply at a time over its pipes, and its
process tree, walked by the judge itself. What the solution's import left running is stopped before the first call;
what a call leaves running is killed and counted; everything dies with the process's PID namespace (or, without one,
through the /proc scan) at the end. :func:`containment_record` says in the trace which of this was in force.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from pathlib import Path
from typing import Any

from solkit.harness import sandbox
from solkit.harness.spawn import Spawned, spawn_candidate, terminate


class ProcessFailure(Exception):
    def __init__(self, kind: str, detail: str = "") -> None:  # kind: died | timeout | protocol
        super().__init__(f"{kind}: {detail}")
        self.kind, self.detail = kind, detail


#: How long freeze_leftovers waits for the import's processes to be seen stopped (one stuck in the kernel, in state D,
#: may never be); a process stopped mid-fork finishes the fork first, so its child can appear after the SIGSTOP.
FREEZE_SETTLE_S = 5.0


class CandidateProcess:
    """The sandboxed ``solkit.harness.serve`` process and its two pipes."""

    def __init__(self, job: dict, scratch: Path, plan: dict, startup_timeout: float, spawned: Spawned | None = None):
        """``spawned``: the process already started for this very job (:func:`.spawn.adoptable`), else start it."""
        self.scratch, self.plan = scratch, plan
        spawned = spawned or spawn_candidate(job, scratch, plan)
        self.marker, self.log_path, self.popen = spawned.marker, spawned.log_path, spawned.popen
        self.fd, self.buf, self.next_id = spawned.fd, b"", 1
        self.frozen: set[tuple[int, int]] = set()  # (pid, start time): stopped after the import, or already killed
        self.hello = self._read(0, time.monotonic() + startup_timeout)

    def _read(self, cid: int, deadline: float) -> dict:
        while True:
            if b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    raise ProcessFailure("protocol", f"unparseable reply {line[:80]!r}") from None
                if not isinstance(msg, dict) or msg.get("id") != cid:
                    raise ProcessFailure("protocol", f"unexpected reply {str(msg)[:80]}")
                if self.buf.strip():
                    raise ProcessFailure("protocol", "more than one reply to one command")
                return msg
            wait = deadline - time.monotonic()
            if wait <= 0:
                raise ProcessFailure("timeout")
            ready, _, _ = select.select([self.fd], [], [], min(wait, 0.5))
            chunk = b""
            if ready:
                with contextlib.suppress(BlockingIOError):
                    chunk = os.read(self.fd, 1 << 16)
                if not chunk and self.popen.poll() is not None:
                    raise ProcessFailure("died", f"exit code {self.popen.returncode}")
            elif self.popen.poll() is not None:
                raise ProcessFailure("died", f"exit code {self.popen.returncode}")
            self.buf += chunk
            if len(self.buf) > 1 << 20:
                raise ProcessFailure("protocol", "reply too long")

    def request(self, cmd: str, timeout: float, **data: Any) -> dict:
        cid, self.next_id = self.next_id, self.next_id + 1
        if self.buf.strip():
            raise ProcessFailure("protocol", "unrequested output on the reply pipe")
        try:
            self.popen.stdin.write((json.dumps({"id": cid, "cmd": cmd, **data}) + "\n").encode())
            self.popen.stdin.flush()
        except (BrokenPipeError, OSError):
            self.popen.poll()
            raise ProcessFailure("died", f"exit code {self.popen.returncode}") from None
        return self._read(cid, time.monotonic() + timeout)

    def _others(self) -> set[int]:
        """Live (or unreaped) processes of the candidate's tree other than the server and the ``unshare`` wrapper."""
        root = self.popen.pid
        if self.plan.get("namespaces"):  # orphans re-parent to the namespace's PID 1, the server: all in the tree
            found = set(sandbox.tree(root))
            keep = {root, *sandbox.children(root)}
        else:
            found = set(sandbox.descendants(root, self.marker)) | set(sandbox.tree(root))
            keep = {root}
        return {pid for pid in found - keep if (pid, sandbox.start_time(pid)) not in self.frozen}

    def _settle(self, pids: set[int]) -> None:
        self.frozen |= {(pid, sandbox.start_time(pid)) for pid in pids}

    def freeze_leftovers(self) -> int:
        """SIGSTOP what the solution left running from its import, before any call: it can then do no work (ahead
        or late) for any call, and dies with the rest at the end. Done once every stopped process is seen stopped
        (or dead) and a scan after that finds no new one: a process the signal caught inside fork() completes the
        fork before it stops (Linux restarts a fork only for group-wide signals), and that child, a daemon's second
        fork, appears in /proc only then; on a loaded machine that can be long after the first scans."""
        count, deadline = 0, time.monotonic() + FREEZE_SETTLE_S
        while True:
            settled = all(sandbox.state(pid) in sandbox.NOT_RUNNING for pid, _ in self.frozen)
            others = self._others()
            if (settled and not others) or time.monotonic() > deadline:
                return count
            for pid in others:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
            self._settle(others)
            count += len(others)
            time.sleep(0.005)

    def sched(self) -> dict[int, tuple[int, int]]:
        """Scheduler statistics of the candidate's processes (CPU time, the server's runnable waits)."""
        pids = sandbox.tree(self.popen.pid)
        if not self.plan.get("namespaces"):
            pids = sorted(set(pids) | set(sandbox.descendants(self.popen.pid, self.marker)))
        return sandbox.schedstat(pids)

    def sched_delta(self, before: dict[int, tuple[int, int]], wall_ms: float, calls: int) -> dict[str, float]:
        """Per-call CPU time of the candidate's processes and the server's runnable wait since ``before``."""
        after = self.sched()
        run_ns = sum(r - before.get(pid, (0, 0))[0] for pid, (r, _) in after.items())
        server = self.popen.pid if not self.plan.get("namespaces") else next(iter(sandbox.children(self.popen.pid)), 0)
        wait_ms = (after.get(server, (0, 0))[1] - before.get(server, (0, 0))[1]) / 1e6
        return {"wait_ms": wait_ms, "unwaited_per_call_ms": max(wall_ms - wait_ms, 0.0) / calls,
                "cpu_per_call_ms": run_ns / 1e6 / calls}  # fmt: skip

    def kill_new(self) -> int:
        """SIGKILL every process started since the import (alive or unreaped); returns how many there were. Each is
        counted once: one whose parent is stopped stays unreaped until the end."""
        others = self._others()
        for pid in others:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self._settle(others)
        return len(others)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def close(self) -> int:
        """Kill the process and every descendant; returns how many stragglers the /proc scan found."""
        return terminate(self.popen, self.fd, self.marker)


def containment_record(plan: dict, hello: dict | None, stragglers: int, frozen: int = 0) -> dict[str, Any]:
    rec: dict[str, Any] = {"sandbox": bool(plan.get("enabled")), "frozen_after_import": frozen}
    if plan.get("enabled"):
        rec["namespaces"] = "pid, mount, net" if plan.get("namespaces") else None
        rec["descendants"] = ("killed with the PID namespace" if plan.get("namespaces")
                              else "tracked through /proc (parent chain, environment marker) and killed")  # fmt: skip
        confined = (hello or {}).get("confined") or {}
        rec["landlock"] = confined.get("landlock")
        rec["rlimits"] = confined.get("rlimits")
        rec["environment"] = "allowlist"
        rec["cwd"] = "own scratch directory"
    rec["stragglers_killed"] = stragglers
    return rec
