"""A pre-imported process that forks one fresh worker per solution.

Importing torch takes seconds; a suite of many small problems would spend most of its time
starting workers. This server imports torch, triton and the worker once, never touches CUDA (so a
forked child may initialise it), and on each request forks a child that becomes an independent
worker: its own session (so it can be killed with its process group), stdout/stderr to the job's
log, events to a named pipe. Requests and replies are JSON lines on stdin/stdout:

``{"job": path, "fifo": path, "log": path}`` → ``{"pid": N}``

Children are reaped automatically (SIGCHLD ignored); the runner detects a dead worker by polling
its pid. Every child is a separate process: a crash or hang of one candidate affects nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import sys


def serve() -> None:
    import torch  # the point of the server: import once

    import solkit.harness.worker as worker

    # Triton is not imported here: a forked child must find CUDA untouched, and importing it is cheap
    # next to torch. A CUDA context in this process would make every child fail, so refuse to serve.
    if torch.cuda.is_initialized():
        raise SystemExit("fork server: CUDA already initialised; use spawned workers")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    while True:
        line = sys.stdin.readline()
        if not line:
            return
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
    serve()
