"""The local pool: one long-lived worker process per device, fed from one queue.

Each worker is a ``multiprocessing`` process started with the *spawn* method (a fresh interpreter: no CUDA
state or locks inherited from the parent), pinned to its device by ``CUDA_VISIBLE_DEVICES`` before it
starts (a CPU worker sees no GPU). It first runs the caller's *setup* once (calibrate its device, say) and
says hello with its device's identity; then it takes one item at a time over its own pipe.

The queue stays in the parent: an idle worker is handed the next waiting item (:class:`Dispatch`), so a
slow item holds up only its worker, and the parent always knows which item each worker is running. A
worker that dies (killed, out of memory, its device gone) loses only that item, which is retried once on
another worker and then reported failed; a worker that died is started again once (a device whose setup
fails is dropped). What an item does inside the worker (the judge's own processes and their containment)
is the item's business: the pool only runs it.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any

from solkit.errors import SolkitError
from solkit.scale.devices import DeviceSlot, device_identity
from solkit.scale.dispatch import Dispatch
from solkit.scale.work import Call, Item, Outcome, WorkerState, enter_worker, first_line, injected_kill

_ENV_LOCK = threading.Lock()


def _leave() -> None:
    """The worker's end once told to stop. Every reply is sent, so it leaves without the interpreter's teardown:
    finalising torch and the CUDA context takes seconds, and :meth:`LocalPool.close` waits for the process. Processes
    its items started by ``subprocess`` (a judge's fork server) see their pipes close, as at the command line's own
    exit; a worker that still has ``multiprocessing`` children of its own ends the ordinary way, which joins them."""
    if mp.active_children():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _serve(slot: DeviceSlot, conn, setup: Call | None, incarnation: int, threads: int | None) -> None:
    """The worker process: setup, hello, then items until told to stop (or the pipe closes)."""
    born = time.time()
    os.environ.update(slot.env())
    if threads and "torch" in sys.modules:  # else OMP_NUM_THREADS, set before the spawn, does it
        sys.modules["torch"].set_num_threads(threads)
    try:
        identity = dict(device_identity(slot.device))
        state = WorkerState(device=slot.device, identity=identity, label=slot.label)
        enter_worker(state)
        state.setup = setup() if setup is not None else None
    except BaseException as exc:  # noqa: BLE001 - a device that cannot be set up is reported, not raised
        conn.send(("hello", None, None, first_line(exc), (born, time.time())))
        return
    conn.send(("hello", identity, state.setup, None, (born, time.time())))
    kill_at, n = injected_kill(slot.label, incarnation), 0
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            _leave()
            return
        _, idx, call = msg
        n += 1
        if kill_at == n:
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.perf_counter()
        try:
            reply = ("done", idx, True, call(), None, time.perf_counter() - t0)
        except Exception as exc:  # noqa: BLE001 - the item's failure is its outcome
            reply = ("done", idx, False, None, first_line(exc), time.perf_counter() - t0)
        try:
            conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            conn.send(("done", idx, False, None, f"result not picklable: {first_line(exc)}", reply[-1]))


@dataclass
class _Worker:
    slot: DeviceSlot
    proc: Any = None
    conn: Any = None
    incarnation: int = 0
    ready: bool = False
    busy: int | None = None
    gone: str | None = None  # why this worker is out for good
    deadline: float = 0.0  # by when it must have said hello
    info: dict[str, Any] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)  # when it was asked for, born, ready, heard from (epochs)


class LocalPool:
    """Workers on ``slots`` of this host; :meth:`map_unordered` yields outcomes as items finish."""

    def __init__(self, slots: Sequence[DeviceSlot], setup: Call | None = None, max_restarts: int = 1,
                 setup_timeout: float = 3600.0) -> None:  # fmt: skip
        if not slots:
            raise SolkitError("--devices: no device to run on")
        self.ctx = mp.get_context("spawn")
        self.setup, self.max_restarts, self.setup_timeout = setup, max_restarts, setup_timeout
        n_cpu = sum(s.kind == "cpu" for s in slots)
        # CPU workers share the cores: each gets its share of torch threads instead of all of them.
        self.threads = max(1, (os.cpu_count() or 1) // n_cpu) if n_cpu else None
        self.workers = [_Worker(s) for s in slots]
        self.started = False
        self._times: dict[str, float] = {}

    @property
    def kind(self) -> str:
        return "local"

    @property
    def device_kind(self) -> str:
        """``cuda`` or ``cpu``: what every worker of this pool runs on."""
        return self.workers[0].slot.kind

    def devices(self) -> list[dict[str, Any]]:
        """Per worker that said hello: its label, device identity and the setup's value."""
        return [{"worker": w.slot.label, **w.info} for w in self.workers if w.info]

    def phases(self) -> dict[str, Any]:
        """When the pool's steps happened (epochs, as :meth:`RayPool.phases`): the workers asked for, each worker's
        process born (its interpreter up, before it imports torch), ready (setup done) and its hello read; the first
        item handed out. Where a pooled run's start went, beside the command's own timeline."""
        workers = {w.slot.label: dict(w.times) for w in self.workers if w.times}
        return {**self._times, "actors": workers}

    def _start(self, w: _Worker) -> None:
        parent, child = self.ctx.Pipe()
        threads = self.threads if w.slot.kind == "cpu" else None
        proc = self.ctx.Process(target=_serve, args=(w.slot, child, self.setup, w.incarnation, threads),
                                name=f"solkit-{w.slot.label}", daemon=True)  # fmt: skip
        env = {**w.slot.env(), **({"OMP_NUM_THREADS": str(threads)} if threads else {})}
        with _ENV_LOCK:  # the spawned interpreter takes this environment: pinned before it imports anything
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                proc.start()
            finally:
                for k, v in saved.items():
                    os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        child.close()
        w.proc, w.conn, w.ready, w.busy = proc, parent, False, None
        self._times.setdefault("actors_asked", time.time())
        w.deadline = time.monotonic() + self.setup_timeout

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for w in self.workers:
            if w.proc is None:
                continue
            if not w.ready:  # still in its setup (a calibration can take a minute): nothing of it is needed now
                w.proc.kill()
                continue
            with contextlib.suppress(OSError, ValueError):
                w.conn.send(None)
        for w in self.workers:
            if w.proc is None:
                continue
            w.proc.join(timeout=10)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(timeout=5)
            w.conn.close()
            w.proc = None

    def _live(self) -> list[_Worker]:
        return [w for w in self.workers if w.proc is not None and w.gone is None]

    def start(self, wait_ready: bool = True) -> None:
        """Start the workers (once); with ``wait_ready``, return when each has said hello or is out."""
        if not self.started:
            for w in self.workers:
                self._start(w)
            self.started = True
        idle = Dispatch([])
        while wait_ready and any(not w.ready for w in self._live()):
            pending = [w for w in self._live() if not w.ready]
            wait([w.conn for w in pending] + [w.proc.sentinel for w in pending], timeout=1.0)
            for w in pending:
                list(self._drain(w, idle))
                if w.proc is not None and not w.proc.is_alive():
                    list(self._died(w, idle))
                elif not w.ready and time.monotonic() > w.deadline:
                    w.proc.kill()

    def map_unordered(self, items: Sequence[Item]) -> Iterator[Outcome]:
        """Run ``items``; yield one :class:`Outcome` per item, in the order they finish."""
        d = Dispatch(items)
        self.start(wait_ready=False)
        while not d.finished():
            live = self._live()
            if not live:
                why = "; ".join(f"{w.slot.label}: {w.gone}" for w in self.workers) or "no worker"
                yield from d.fail_waiting(f"no worker left ({why})")
                break
            self._feed(d, live)
            wait([w.conn for w in live] + [w.proc.sentinel for w in live], timeout=1.0)
            for w in live:
                yield from self._drain(w, d)
                if w.proc is not None and not w.proc.is_alive():
                    yield from self._drain(w, d)  # a reply sent just before the end still counts
                    yield from self._died(w, d)
                elif not w.ready and time.monotonic() > w.deadline:
                    w.proc.kill()

    def _feed(self, d: Dispatch, live: list[_Worker]) -> None:
        for w in live:
            if not w.ready or w.busy is not None:
                continue
            idx = d.take(w.slot.label, others_alive=len(live) > 1)
            if idx is None:
                continue
            try:
                w.conn.send(("run", idx, d.items[idx].call))
            except (OSError, ValueError, BrokenPipeError):
                d.give_back(idx)  # the worker is dying; its death is handled when its sentinel fires
                continue
            w.busy = idx
            self._times.setdefault("first_item_asked", time.time())

    def _drain(self, w: _Worker, d: Dispatch) -> Iterator[Outcome]:
        while w.proc is not None:
            try:
                if not w.conn.poll():
                    return
                msg = w.conn.recv()
            except (EOFError, OSError):
                return
            if msg[0] == "hello":
                _, identity, value, error, (born, ready) = msg
                if not w.incarnation:
                    w.times = {"born": born, "ready": ready, "hello_read": time.time()}
                if error is not None:
                    w.gone = f"setup failed: {error}"
                    continue
                w.ready, w.info = True, {"identity": identity, "setup": value}
            else:
                _, idx, ok, value, error, seconds = msg
                w.busy = None
                yield d.settle(Outcome(idx, d.items[idx].key, ok, value, error, dict(w.info.get("identity") or {}),
                                       w.slot.label, seconds=seconds))  # fmt: skip

    def _died(self, w: _Worker, d: Dispatch) -> Iterator[Outcome]:
        code = w.proc.exitcode
        why = f"worker process ended (exit code {code})" if code is not None and code >= 0 else (
            f"worker process killed by signal {-code}" if code is not None else "worker process ended")  # fmt: skip
        w.proc.join(timeout=1)
        w.conn.close()
        w.proc = None
        if w.busy is not None:
            idx, w.busy = w.busy, None
            out = d.lost(idx, w.slot.label, why)
            if out is not None:
                out.device = dict(w.info.get("identity") or {})
                yield out
        if w.gone is None and w.ready and w.incarnation < self.max_restarts:
            w.incarnation += 1
            self._start(w)
        elif w.gone is None:
            w.gone = why if w.ready else f"died during setup: {why}"
