"""The same work on a Ray cluster: one Ray actor per device, fed from the same queue as the local pool.

Ray does the cluster work: it places each actor on a node with a free GPU (``num_gpus=1``, Ray pins it with
``CUDA_VISIBLE_DEVICES``) or a free core (``num_cpus=1``), restarts an actor whose process or node died
(once, possibly on another node), and moves every argument as a Ray object (``ray.put``): problems and
solutions travel as :class:`~solkit.scale.work.Bundle` values, never through a shared filesystem. solkit
only keeps the queue (:class:`~solkit.scale.dispatch.Dispatch`): an idle actor gets the next item, and an
item whose actor or node died is tried once more on another actor, then reported failed.

ray is an optional extra (``pip install 'solkit[ray]'``), imported only here and only when asked for.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

from solkit.errors import SolkitError
from solkit.scale.devices import device_identity
from solkit.scale.dispatch import Dispatch
from solkit.scale.work import Call, Item, Outcome, WorkerState, enter_worker, first_line

_PLAIN = (str, int, float, bool, type(None))


def import_ray():
    try:
        import ray
    except ImportError:
        raise SolkitError("--ray needs the ray package: pip install 'solkit[ray]'") from None
    return ray


class RayWorker:
    """The body of one actor: its device, the setup run once, then one item per call."""

    def __init__(self, kind: str, setup: Call | None) -> None:
        import os

        import ray

        device = "cuda:0" if kind == "cuda" else "cpu"
        ctx = ray.get_runtime_context()
        gpus = ",".join(str(g) for g in ray.get_gpu_ids())
        self.label = f"ray:{ctx.get_node_id()[:8]}:" + (f"gpu{gpus}" if kind == "cuda" else f"pid{os.getpid()}")
        self.error: str | None = None
        self.identity: dict[str, Any] = {}
        try:
            self.identity = dict(device_identity(device))
            state = WorkerState(device=device, identity=self.identity, label=self.label)
            enter_worker(state)
            state.setup = setup() if setup is not None else None
            self.setup = state.setup
        except Exception as exc:  # noqa: BLE001 - reported in hello
            self.error, self.setup = first_line(exc), None

    def hello(self) -> tuple[str, dict[str, Any], Any, str | None]:
        return self.label, self.identity, self.setup, self.error

    def run(self, fn, kwargs, *args) -> tuple[bool, Any, str | None, float]:
        if self.error is not None:
            return False, None, f"setup failed on {self.label}: {self.error}", 0.0
        t0 = time.perf_counter()
        try:
            return True, fn(*args, **(kwargs or {})), None, time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - the item's failure is its outcome
            return False, None, first_line(exc), time.perf_counter() - t0


class RayPool:
    """Actors on a Ray cluster (``address``: ``auto`` for a running cluster, ``local`` to start one here, or an
    address such as ``ray://head:10001``); :meth:`map_unordered` yields outcomes as items finish."""

    def __init__(self, address: str, kind: str = "auto", count: int | None = None, setup: Call | None = None,
                 setup_timeout: float = 3600.0) -> None:  # fmt: skip
        ray = self.ray = import_ray()
        if not ray.is_initialized():
            try:
                ray.init(address=None if address == "local" else address, include_dashboard=False,
                         log_to_driver=False)  # fmt: skip
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise SolkitError(f"--ray {address}: cannot connect ({first_line(exc)})") from None
        res = ray.cluster_resources()
        if kind == "auto":
            kind = "cuda" if res.get("GPU", 0) >= 1 else "cpu"
        have = int(res.get("GPU", 0) if kind == "cuda" else res.get("CPU", 0))
        count = have if count is None else count
        if count < 1 or count > have:
            what = "GPUs" if kind == "cuda" else "CPUs"
            raise SolkitError(f"--ray {address}: the cluster has {have} {what}; cannot place {count} workers")
        self.kind_, self.setup, self.count, self.setup_timeout = kind, setup, count, setup_timeout
        self.actors: list[Any] = []
        self.hellos: list[Any] = []  # the actors' hello calls, until read
        self.labels = [f"ray#{i}" for i in range(count)]
        self.info: list[dict[str, Any]] = [{} for _ in range(count)]
        self.failures = [0] * count

    @property
    def kind(self) -> str:
        return "ray"

    @property
    def device_kind(self) -> str:
        return self.kind_

    def start(self, wait_ready: bool = True) -> None:
        """Start the actors (once, else on first use); each runs the setup and says hello (or why it could not).
        Without ``wait_ready`` the actors start up in the background; the hellos are read on first use."""
        if not self.actors:
            opts = {"num_gpus": 1, "num_cpus": 1} if self.kind_ == "cuda" else {"num_cpus": 1}
            actor = self.ray.remote(RayWorker).options(max_restarts=1, max_task_retries=0, **opts)
            self.actors = [actor.remote(self.kind_, self.setup) for _ in range(self.count)]
            self.hellos = [a.hello.remote() for a in self.actors]
        if not wait_ready or not self.hellos:
            return
        hellos, self.hellos = self.hellos, []
        for i, ref in enumerate(hellos):
            try:
                label, identity, value, error = self.ray.get(ref, timeout=self.setup_timeout)
            except Exception as exc:  # noqa: BLE001 - an actor that cannot start is left out
                self.failures[i] = 99
                self.info[i] = {"error": first_line(exc)}
                continue
            self.labels[i] = label
            self.info[i] = {"identity": identity, "setup": value}
            if error is not None:
                self.failures[i] = 99
                self.info[i]["error"] = error

    def devices(self) -> list[dict[str, Any]]:
        return [{"worker": lab, **info} for lab, info in zip(self.labels, self.info) if info.get("identity")]

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
                self.ray.kill(a)
        self.actors, self.hellos = [], []

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def map_unordered(self, items: Sequence[Item]) -> Iterator[Outcome]:
        ray = self.ray
        lost_errors = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.ObjectLostError)
        self.start()
        d, cache, running = Dispatch(items), {}, {}
        busy = [False] * len(self.actors)
        while not d.finished():
            live = [i for i, f in enumerate(self.failures) if f <= 1]
            if not live:
                yield from d.fail_waiting("no Ray worker left: " + "; ".join(str(x.get("error")) for x in self.info))
                break
            for i in live:
                if busy[i]:
                    continue
                idx = d.take(self.labels[i], others_alive=len(live) > 1)
                if idx is None:
                    continue
                call = items[idx].call
                ref = self.actors[i].run.remote(call.fn, call.kwargs or None, *self._args(call, cache))
                running[ref], busy[i] = (i, idx), True
            if not running:
                continue
            done, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            for ref in done:
                i, idx = running.pop(ref)
                busy[i] = False
                identity = dict(self.info[i].get("identity") or {})
                try:
                    ok, value, error, seconds = ray.get(ref)
                except lost_errors as exc:
                    self.failures[i] += 1  # Ray restarts the actor once; a second loss retires it
                    out = d.lost(idx, self.labels[i], first_line(exc))
                    if out is not None:
                        out.device = identity
                        yield out
                    continue
                except Exception as exc:  # noqa: BLE001 - e.g. a result that cannot be pickled
                    ok, value, error, seconds = False, None, first_line(exc), 0.0
                yield d.settle(Outcome(idx, items[idx].key, ok, value, error, identity, self.labels[i],
                                       seconds=seconds))  # fmt: skip
