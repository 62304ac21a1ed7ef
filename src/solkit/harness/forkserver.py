"""A pre-imported process that forks one fresh worker per solution.

Importing torch takes seconds; a suite of many small problems would spend most of its time
starting workers. This server imports torch, triton and the worker once, never touches CUDA (so a
forked child may initialise it), and on each request forks a child that becomes an independent
worker: its own session (so it can be killed with its process group), stdout/stderr to the job's
log, events to a named pipe. Requests and replies are JSON lines on stdin/stdout:

``{"job": path, "fifo": path, "log": path}`` → ``{"pid": N}``

Children are reaped automatically (SIGCHLD ignored); the runner detects a dead worker by polling
its pid. Every child is a separate process: a crash or hang of one candidate affects nothing else.

:class:`ForkServer` is the judge's side: ``solkit eval`` spawns the server before it imports torch itself
(:meth:`ForkServer.prestart`), so the two imports run at the same time, and waits for it only when the first
reference process is needed. Where the evaluation runs on a GPU, the server also imports ``torch._dynamo``,
which the CUDA profiler's first use imports (the reference's kernel timing: seconds in every reference process
otherwise). It then checks that the import did not load the CUDA driver into its own process (``libcuda``
mapped), so that its forked children can use CUDA; if it did, it refuses to serve and the judge starts a server
without the import.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from solkit.harness import sandbox

#: Imported ahead where the evaluation runs on a GPU (see the module docstring).
GPU_PRELOAD = ("torch._dynamo",)


def child_env() -> dict[str, str]:
    """The environment of the judge's trusted children: the caller's, with solkit's import path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = sandbox.import_path()
    env["PYTHONUNBUFFERED"] = "1"
    return env


class ForkServer:
    """The shared fork server process, as the judge sees it: spawned once, ready when its first line arrives."""

    _instance: ForkServer | None = None
    _broken = False

    def __init__(self, preload: tuple[str, ...] = ()) -> None:
        self.spawned_at, self.ready_at, self.preload = time.time(), None, preload
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "solkit.harness.forkserver", *preload],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=child_env(),
            text=True,
            bufsize=1,
        )
        atexit.register(self.close)

    def wait_ready(self) -> bool:
        if self.ready_at is None:
            line = self.proc.stdout.readline()
            if not line or not json.loads(line).get("ready"):
                return False
            self.ready_at = time.time()
        return True

    @classmethod
    def prestart(cls, device: str) -> None:
        """Spawn the server now, without waiting for it (``solkit eval``, before its own imports); ``device``: the
        device the evaluation will run on, as far as it is known without torch."""
        if cls._instance is None or cls._instance.proc.poll() is not None:
            cls._instance = ForkServer(GPU_PRELOAD if device.startswith("cuda") else ())

    @classmethod
    def get(cls, device: str = "cpu") -> ForkServer | None:
        """The ready server (spawned now if none is running), or None when it cannot serve (spawn workers then)."""
        if cls._broken:
            return None
        try:
            if cls._instance is None or (cls._instance.ready_at and cls._instance.proc.poll() is not None):
                cls._instance = ForkServer(GPU_PRELOAD if device.startswith("cuda") else ())
            if cls._instance.wait_ready():
                return cls._instance
            if cls._instance.preload:  # the preload touched CUDA here: a server without it
                cls._instance.close()
                cls._instance = ForkServer()
                if cls._instance.wait_ready():
                    return cls._instance
        except (OSError, ValueError):
            pass
        if cls._instance is not None:
            cls._instance.close()
        cls._instance, cls._broken = None, True  # it cannot serve here (CUDA initialised, no fork): spawn from now on
        return None

    @classmethod
    def current(cls) -> ForkServer | None:
        return cls._instance

    def start(self, job: Path, fifo: Path, log: Path) -> int:
        self.proc.stdin.write(json.dumps({"job": str(job), "fifo": str(fifo), "log": str(log)}) + "\n")
        self.proc.stdin.flush()
        return int(json.loads(self.proc.stdout.readline())["pid"])

    def close(self) -> None:
        """End of input: the server leaves by itself; nobody waits for its interpreter to tear torch down."""
        try:
            self.proc.stdin.close()
        except OSError:
            self.proc.kill()


def cuda_driver_loaded() -> bool:
    """Whether this process has loaded the CUDA driver (``libcuda`` mapped): after that, forked children cannot use
    CUDA. Importing torch does not load it; its first CUDA call does."""
    try:
        return "libcuda.so" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


def serve(preload: list[str] | None = None) -> None:
    import importlib

    import torch  # the point of the server: import once

    import solkit.harness.worker as worker

    driver = cuda_driver_loaded()
    for name in preload or ():
        importlib.import_module(name)
    # Triton is not imported here: a forked child must find CUDA untouched, and importing it is cheap
    # next to torch. A CUDA context in this process, or a driver the preload loaded, would make every child
    # fail: refuse to serve.
    if torch.cuda.is_initialized() or (cuda_driver_loaded() and not driver):
        sys.stdout.write(json.dumps({"ready": False, "why": "CUDA driver loaded in the fork server"}) + "\n")
        sys.stdout.flush()
        raise SystemExit("fork server: CUDA already initialised; use spawned workers")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    while True:
        line = sys.stdin.readline()
        if not line:  # the judge is gone; leave without the seconds of torch's teardown (its children live on)
            sys.stdout.flush()
            os._exit(0)
        try:
            req = json.loads(line)
        except json.JSONDecodeError:
            continue
        if torch.cuda.is_initialized():  # pragma: no cover - defensive: never fork a CUDA process
            out.write(json.dumps({"error": "CUDA initialised in the fork server"}) + "\n")
            out.flush()
            return
        pid = os.fork()
        if pid == 0:  # child: become the worker
            rc = 1
            try:
                os.setsid()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                os.close(log)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                fd = os.open(req["fifo"], os.O_WRONLY)
                sys.stdout = os.fdopen(1, "w", buffering=1)
                sys.stderr = os.fdopen(2, "w", buffering=1)
                rc = worker.main(["worker", req["job"], str(fd)])
            except BaseException:  # noqa: BLE001 - report anything, then leave without running the server's code
                import traceback

                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(rc)
        out.write(json.dumps({"pid": pid}) + "\n")
        out.flush()


if __name__ == "__main__":
    serve(sys.argv[1:])
