"""Analysis of an untrusted reference in a child process with a deadline.

A problem's reference is code from a file: it may raise or hang at import, or call ``os._exit``. Traced
in the caller's process, any of these kills or freezes ``solkit analyze`` (and whatever else called it).
Here the whole analysis runs in a spawned child; the caller gets the results, or one
:class:`~solkit.errors.SolkitError` line naming the problem and what the reference did.
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError

#: Seconds an analysis may take by default: tracing on meta tensors takes well under a second per workload, so
#: this only ends references that hang.
DEFAULT_TIMEOUT_S = 120.0


def _child(conn: Any, problem: str, kwargs: dict[str, Any]) -> None:
    try:
        from solkit.sol.analysis import analyze_problem

        conn.send(("ok", analyze_problem(problem, **kwargs)))
    except SolkitError as exc:
        conn.send(("solkit", str(exc)))
    except BaseException as exc:  # the reference's own failure, reported as data, never re-raised here
        text = str(exc).strip().splitlines()
        conn.send(("error", f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")))
    finally:
        conn.close()


def analyze_problem_isolated(problem: str | Path, *, timeout_s: float = DEFAULT_TIMEOUT_S, **kwargs: Any) -> list[Any]:
    """``analysis.analyze_problem(problem, **kwargs)`` run in a spawned child that is killed after ``timeout_s``."""
    if not timeout_s > 0:
        raise SolkitError(f"analysis timeout must be a positive number of seconds, not {timeout_s!r}")
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, str(problem), kwargs), daemon=True)
    proc.start()
    send.close()
    try:
        if not recv.poll(timeout_s):
            raise SolkitError(f"{problem}: the reference's analysis did not finish within {timeout_s:g} s (killed)")
        try:
            kind, payload = recv.recv()
        except EOFError:
            proc.join(5)
            raise SolkitError(
                f"{problem}: the reference ended the analysis process (exit code {proc.exitcode})"
            ) from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        recv.close()
    if kind == "ok":
        return payload
    if kind == "solkit":
        raise SolkitError(payload)
    raise SolkitError(f"{problem}: the reference failed during analysis: {payload}")
