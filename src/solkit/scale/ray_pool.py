"""The same work on a Ray cluster: one Ray actor per device, fed from the same queue as the local pool.

Ray does the cluster work: it places each actor on a node with a free GPU (``num_gpus=1``, Ray pins it with
``CUDA_VISIBLE_DEVICES``) or free cores, restarts an actor whose process or node died (once, possibly on
another node), and moves every argument as a Ray object (``ray.put``): problems and solutions travel as
:class:`~solkit.scale.work.Bundle` values, never through a shared filesystem. solkit only keeps the queue
(:class:`~solkit.scale.dispatch.Dispatch`): an item whose actor or node died is tried once more on another
actor, then reported failed.

What a run pays on top of the work itself, and how it is kept off the critical path:

* **start**: the actors are created first and import and set up (torch, the device, the caller's setup) while
  the caller prepares its items; items are submitted at once and wait in the actor's own queue behind its
  constructor, so the first one starts the moment the actor is ready (no hello round trip first);
* **per item**: each actor holds up to ``depth`` items (the next one is already there when one returns), so
  it never waits for the caller between items; once nothing waits, an item queued behind a slow one is taken
  back (``ray.cancel`` of a call not yet started) for an idle actor: a slow item holds up only its actor;
* **end**: the actors are killed; a cluster this process joined is left as it is (the process's exit
  disconnects it), a cluster it started (``local``) is shut down.

Each actor asks for a share of its node's cores (``num_cpus``) and runs torch with that many threads, as a
local worker uses its host's cores. :meth:`RayPool.phases` says when each step happened (for a run's timeline).

ray is an optional extra (``pip install 'solkit[ray]'``), imported only here and only when asked for.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from solkit.errors import SolkitError
from solkit.scale.devices import device_identity
from solkit.scale.dispatch import Dispatch
from solkit.scale.work import Call, Item, Outcome, WorkerState, enter_worker, first_line, injected_kill

_PLAIN = (str, int, float, bool, type(None))

#: Items an actor holds at once: the one it runs and the next, so it never waits for the caller between items.
DEPTH = 2

#: What :meth:`RayWorker.run` answers when the actor's setup failed: the item never ran and goes elsewhere.
SETUP_FAILED = "setup failed"


def import_ray():
    try:
        import ray
    except ImportError:
        raise SolkitError("--ray needs the ray package: pip install 'solkit[ray]'") from None
    return ray


def set_threads(threads: int) -> None:
    """torch's threads in this process: set now if torch is loaded, else through the environment it reads."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    else:
        os.environ["OMP_NUM_THREADS"] = str(threads)


class RayWorker:
    """The body of one actor: its device, the setup run once, then one item per call."""

    def __init__(self, kind: str, setup: Call | None, threads: int = 1, kill: tuple[int, str] | None = None) -> None:
        import ray

        self.born = time.time()
        set_threads(threads)
        device = "cuda:0" if kind == "cuda" else "cpu"
        ctx = ray.get_runtime_context()
        gpus = ",".join(str(g) for g in ray.get_gpu_ids())
        self.label = f"ray:{ctx.get_node_id()[:8]}:" + (f"gpu{gpus}" if kind == "cuda" else f"pid{os.getpid()}")
        self.error: str | None = None
        self.identity: dict[str, Any] = {}
        self.setup = None
        try:
            self.identity = dict(device_identity(device))
            state = WorkerState(device=device, identity=self.identity, label=self.label)
            enter_worker(state)
            state.setup = setup() if setup is not None else None
            self.setup = state.setup
            set_threads(threads)  # the setup may have loaded torch after the environment was read
        except Exception as exc:  # noqa: BLE001 - reported in hello
            self.error, self.setup = first_line(exc), None
        self.ready = time.time()
        self.kill, self.n = kill, 0  # the test hook (work.injected_kill, read by the caller): (n-th item, marker)

    def hello(self) -> tuple[str, dict[str, Any], Any, str | None, float, float]:
        return self.label, self.identity, self.setup, self.error, self.born, self.ready

    def run(self, fn, kwargs, *args) -> tuple[bool, Any, str | None, float, float]:
        """(ok, value, error, seconds, started): ``started`` is this node's clock when the item began."""
        started = time.time()
        if self.error is not None:
            return False, None, f"{SETUP_FAILED} on {self.label}: {self.error}", 0.0, started
        self.n += 1
        if self.kill and self.kill[0] == self.n and not os.path.exists(self.kill[1]):
            open(self.kill[1], "w").close()  # the restarted actor (a new process) is not killed again
            os._exit(9)
        t0 = time.perf_counter()
        try:
            return True, fn(*args, **(kwargs or {})), None, time.perf_counter() - t0, started
        except Exception as exc:  # noqa: BLE001 - the item's failure is its outcome
            return False, None, first_line(exc), time.perf_counter() - t0, started


def cpu_share(nodes: list[dict[str, Any]], kind: str, count: int) -> int:
    """Cores per actor, such that every actor still fits: on GPUs the fewest cores per GPU of any GPU node; on
    CPUs the largest share of which ``count`` fit on the nodes' cores."""
    res = [n.get("Resources") or {} for n in nodes if n.get("Alive", True)]
    if kind == "cuda":
        per = [int(r.get("CPU", 0)) // int(r["GPU"]) for r in res if r.get("GPU", 0) >= 1]
        return max(1, min(per, default=1))
    cores = [int(r.get("CPU", 0)) for r in res]
    share = max(1, sum(cores) // max(count, 1))
    while share > 1 and sum(c // share for c in cores) < count:
        share -= 1
    return share


class RayPool:
    """Actors on a Ray cluster (``address``: ``auto`` for a running cluster, ``local`` to start one here, or an
    address such as ``ray://head:10001``); :meth:`map_unordered` yields outcomes as items finish."""

    def __init__(self, address: str, kind: str = "auto", count: int | None = None, setup: Call | None = None,
                 setup_timeout: float = 3600.0, depth: int = DEPTH) -> None:  # fmt: skip
        ray = self.ray = import_ray()
        self.marks: dict[str, Any] = {"connect": time.time()}
        self.owns_cluster = False
        if not ray.is_initialized():
            try:
                ray.init(address=None if address == "local" else address, include_dashboard=False,
                         log_to_driver=False)  # fmt: skip
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise SolkitError(f"--ray {address}: cannot connect ({first_line(exc)})") from None
            self.owns_cluster = address == "local"
        self.marks["connected"] = time.time()
        res = ray.cluster_resources()
        if kind == "auto":
            kind = "cuda" if res.get("GPU", 0) >= 1 else "cpu"
        have = int(res.get("GPU", 0) if kind == "cuda" else res.get("CPU", 0))
        count = have if count is None else count
        if count < 1 or count > have:
            what = "GPUs" if kind == "cuda" else "CPUs"
            raise SolkitError(f"--ray {address}: the cluster has {have} {what}; cannot place {count} workers")
        self.kind_, self.setup, self.count, self.setup_timeout = kind, setup, count, setup_timeout
        self.depth = max(1, depth)
        self.threads = cpu_share(ray.nodes(), kind, count)
        self.actors: list[Any] = []
        self.hellos: dict[Any, int] = {}  # the actors' hello calls, until read
        self.keys = [f"ray#{i}" for i in range(count)]  # the queue's names for the actors (stable)
        self.labels = list(self.keys)  # the actors' own labels once they said hello (node and GPU)
        self.info: list[dict[str, Any]] = [{} for _ in range(count)]
        self.failures = [0] * count  # deaths seen per actor; 99: out for good (its setup failed)
        self.queues: list[deque] = [deque() for _ in range(count)]  # per actor: (ref, item) in submission order
        self.flight: dict[Any, tuple[int, int]] = {}  # ref -> (actor, item)
        self.stolen: set[Any] = set()  # refs taken back (queued behind a slow item), cancelled, still read
        self.last_end = [0.0] * count
        self.idle = {"gaps": 0, "seconds": 0.0}  # actors' time between one item's end and the next one's start

    @property
    def kind(self) -> str:
        return "ray"

    @property
    def device_kind(self) -> str:
        return self.kind_

    def start(self, wait_ready: bool = True) -> None:
        """Start the actors (once, else on first use); each runs the setup and says hello (or why it could not).
        Without ``wait_ready`` the actors start up in the background; the hellos are read as they come."""
        if not self.actors:
            opts = {"num_gpus": 1} if self.kind_ == "cuda" else {}
            actor = self.ray.remote(RayWorker).options(max_restarts=1, max_task_retries=0, num_cpus=self.threads,
                                                       **opts)  # fmt: skip
            hooks = [injected_kill(key, 0) for key in self.keys]
            marker = os.path.join(tempfile.gettempdir(), f"solkit_ray_kill_{os.getpid()}_{time.time_ns()}")
            self.markers = [f"{marker}_{i}" for i in range(self.count)]
            self.actors = [actor.remote(self.kind_, self.setup, self.threads, (n, self.markers[i]) if n else None)
                           for i, n in enumerate(hooks)]  # fmt: skip
            self.hellos = {a.hello.remote(): i for i, a in enumerate(self.actors)}
            self.marks["actors_asked"] = time.time()
        if wait_ready:
            for ref in list(self.hellos):
                self._hello(ref, timeout=self.setup_timeout)

    def _hello(self, ref, timeout: float | None = None) -> None:
        i = self.hellos.pop(ref)
        try:
            label, identity, value, error, born, ready = self.ray.get(ref, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - an actor that cannot start is left out
            self.failures[i] = 99
            self.info[i] = {"error": first_line(exc)}
            return
        self.labels[i] = label
        self.info[i] = {"identity": identity, "setup": value}
        self.marks.setdefault("actors", {})[self.keys[i]] = {"born": born, "ready": ready, "hello_read": time.time()}
        if error is not None:
            self.failures[i] = 99
            self.info[i]["error"] = f"{SETUP_FAILED}: {error}"

    def devices(self) -> list[dict[str, Any]]:
        return [{"worker": lab, **info} for lab, info in zip(self.labels, self.info) if info.get("identity")]

    def phases(self) -> dict[str, Any]:
        """When each step happened (this host's clock, seconds since the epoch): the connection, the actors'
        creation, each actor's construction (its node's clock) and hello, the first item's submission; and the
        actors' idle time between items."""
        return {**self.marks, "idle_between_items": {"gaps": self.idle["gaps"],
                                                     "seconds": round(self.idle["seconds"], 3)}}  # fmt: skip

    def _args(self, call: Call, cache: dict[int, Any]) -> list[Any]:
        out = []
        for a in call.args:
            if isinstance(a, _PLAIN):
                out.append(a)
                continue
            if id(a) not in cache:  # one object per distinct argument: a problem sent to 8 GPUs is put once
                cache[id(a)] = (a, self.ray.put(a))
            out.append(cache[id(a)][1])
        return out

    def close(self) -> None:
        for a in self.actors:
            with contextlib.suppress(Exception):  # already gone
                self.ray.kill(a, no_restart=True)
        self.actors, self.hellos = [], {}
        self.flight.clear()
        for path in getattr(self, "markers", []):
            with contextlib.suppress(OSError):
                os.remove(path)
        if self.owns_cluster and self.ray.is_initialized():
            self.ray.shutdown()  # a cluster this process started ends with it; one it joined is left running
            self.owns_cluster = False

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _live(self) -> list[int]:
        return [i for i, f in enumerate(self.failures) if f <= 1]

    def _feed(self, d: Dispatch, items: Sequence[Item], live: list[int], cache: dict[int, Any]) -> None:
        """Fill each live actor's queue: one item always, a second while more items wait than idle actors take."""
        for i in live:
            while len(self.queues[i]) < self.depth and d.waiting:
                idle = sum(1 for j in live if not self.queues[j])
                if self.queues[i] and len(d.waiting) <= idle:
                    break
                idx = d.take(self.keys[i], others_alive=len(live) > 1)
                if idx is None:
                    break
                call = items[idx].call
                ref = self.actors[i].run.remote(call.fn, call.kwargs or None, *self._args(call, cache))
                self.flight[ref] = (i, idx)
                self.queues[i].append((ref, idx))
                self.marks.setdefault("first_item_asked", time.time())

    def _steal(self, d: Dispatch, live: list[int]) -> None:
        """Nothing waits and an actor that said hello is idle: an item queued behind another actor's running one
        waits again, for the idle actor. Its queued call is cancelled (Ray drops it when it comes up, unrun); if
        it ran all the same, whichever copy comes back first is the outcome."""
        if not any(not self.queues[i] and self.info[i].get("identity") for i in live):
            return
        for j in live:
            if len(self.queues[j]) > 1:
                ref, idx = self.queues[j].pop()
                self.stolen.add(ref)
                with contextlib.suppress(Exception):  # already finished: it is read as usual
                    self.ray.cancel(ref)
                d.give_back(idx)
                return

    def _drop(self, ref) -> tuple[int, int]:
        i, idx = self.flight.pop(ref)
        with contextlib.suppress(ValueError):
            self.queues[i].remove((ref, idx))
        self.stolen.discard(ref)
        return i, idx

    def _lost(self, d: Dispatch, i: int, why: str, started: bool) -> Iterator[Outcome]:
        """Actor ``i`` died: the item it was running (the first of its queue, if ``started``) is lost and retried
        elsewhere once; the ones queued behind it never started and wait again, their attempt not counted."""
        queued = list(self.queues[i])
        for ref, _ in queued:
            self._drop(ref)
        for _, idx in reversed(queued[1:] if started else queued):
            d.give_back(idx)
        if not started:
            return
        self.failures[i] += 1  # Ray restarts the actor once; a second loss retires it
        out = d.lost(queued[0][1], self.keys[i], why)
        if out is not None:
            out.device, out.worker = dict(self.info[i].get("identity") or {}), self.labels[i]
            yield out

    def _read(self, d: Dispatch, items: Sequence[Item], ref) -> Iterator[Outcome]:
        ray = self.ray
        if ref not in self.flight:  # dropped already (its actor's earlier item reported the death)
            return
        i, idx = self.flight[ref]
        if ref in self.stolen:  # taken back for another actor: its result counts only if it ran and came first
            self._drop(ref)
            with contextlib.suppress(Exception):
                result = ray.get(ref)
                if idx not in d.settled:
                    d.reclaim(idx)
                    yield from self._settle(d, items, i, idx, result)
            return
        try:
            result = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            self._drop(ref)
            d.give_back(idx)
            return
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError) as exc:
            ran = bool(self.info[i].get("identity"))  # it said hello: its first queued item had started
            if not ran:
                self.failures[i] = 99
                self.info[i].setdefault("error", first_line(exc))
            yield from self._lost(d, i, first_line(exc), started=ran)
            return
        except Exception as exc:  # noqa: BLE001 - e.g. a result that cannot be pickled
            result = (False, None, first_line(exc), 0.0, 0.0)
        self._drop(ref)
        if idx not in d.settled:  # else a copy taken back for another actor came back first
            yield from self._settle(d, items, i, idx, result)

    def _settle(self, d: Dispatch, items: Sequence[Item], i: int, idx: int, result: tuple) -> Iterator[Outcome]:
        ok, value, error, seconds, started = result
        if not ok and error and error.startswith(SETUP_FAILED):
            self.failures[i] = 99  # this actor cannot run items: they go to the others
            self.info[i].setdefault("error", error)
            d.give_back(idx)
            return
        if started and self.last_end[i]:
            self.idle["gaps"] += 1
            self.idle["seconds"] += max(0.0, started - self.last_end[i])
        self.last_end[i] = started + seconds if started else 0.0
        identity = dict(self.info[i].get("identity") or {})
        yield d.settle(Outcome(idx, items[idx].key, ok, value, error, identity, self.labels[i], seconds=seconds))

    def map_unordered(self, items: Sequence[Item]) -> Iterator[Outcome]:
        ray = self.ray
        self.start(wait_ready=False)
        d, cache = Dispatch(items), {}
        # Copies still queued from an earlier call (items taken back that ran elsewhere first) are not this call's.
        self.flight.clear()
        self.stolen.clear()
        for q in self.queues:
            q.clear()
        self.last_end = [0.0] * self.count
        while not d.finished():
            live = self._live()
            if not live:
                why = "; ".join(str(x.get("error")) for x in self.info if x.get("error")) or "every actor died"
                for ref in list(self.flight):  # queued on actors that are out: never run
                    _, idx = self._drop(ref)
                    if idx not in d.settled and idx not in d.waiting:
                        d.give_back(idx)
                yield from d.fail_waiting(f"no Ray worker left: {why}")
                break
            self._feed(d, items, live, cache)
            if not d.waiting:
                self._steal(d, live)
            refs = list(self.hellos) + list(self.flight)  # hellos first: an actor is known before its items are read
            if not refs:
                continue
            ready, _ = ray.wait(refs, num_returns=1, timeout=1.0)
            if ready:  # everything else that is ready too, in one pass
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                if ref in self.hellos:
                    self._hello(ref)
                else:
                    yield from self._read(d, items, ref)
        for ref in [r for r in self.hellos if ray.wait([r], timeout=0)[0]]:
            self._hello(ref)  # an actor that ran nothing still says who it is
