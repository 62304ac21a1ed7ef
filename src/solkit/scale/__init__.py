"""solkit.scale: long jobs spread over local devices (a process per device, work stealing) and Ray.

The public face, for the commands above it (bench, eval-suite, tune, model):

* :func:`open_pool` — a pool for ``--devices`` (local worker processes) or ``--ray`` (Ray actors), or None
  for a serial run; both pools have ``map_unordered(items) -> Iterator[Outcome]``, ``start()`` (wait for
  every worker's setup), ``devices()`` and ``close()`` (and are context managers);
* :func:`run_all` — every item on a pool (or in this process when the pool is None), outcomes in item order;
* :class:`Item` / :class:`Call` — one unit of work: a key and a module-level function with its arguments;
* :class:`Outcome` — its value or one-line error, the device identity it ran on, the attempts it took;
* :func:`worker_state` — inside an item: the worker's torch device, device identity and setup value;
* :func:`pack` / :func:`unpacked` — a directory as a :class:`Bundle` of bytes, and back (for Ray);
* :func:`device_identity` / :func:`parse_devices` — the identity rows carry, and the ``--devices`` grammar.

docs/scale.md has the design.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from solkit.errors import SolkitError
from solkit.scale.devices import DeviceSlot, cpu_identity, device_identity, parse_devices
from solkit.scale.work import Bundle, Call, Item, Outcome, WorkerState, first_line, pack, unpacked, worker_state


def open_pool(devices: str | None = None, ray: str | None = None, setup: Call | None = None):
    """The pool for ``--devices`` / ``--ray``, or None when neither is given (run serially).

    With ``--ray``, ``devices`` may say ``cpu:N`` (N CPU actors) or ``all``/None (every GPU of the cluster, its
    CPUs if it has none); GPU indices name devices of this host and make no sense on a cluster.
    """
    if ray:
        from solkit.scale.ray_pool import RayPool

        kind, count = "auto", None
        if devices:
            text = devices.strip().lower()
            if text.startswith("cpu"):
                kind, count = "cpu", len(parse_devices(text, "--devices"))
            elif text != "all":
                raise SolkitError(f"--devices {devices!r} with --ray: give all or cpu:N (Ray places the workers)")
        return RayPool(ray, kind=kind, count=count, setup=setup)
    if devices:
        from solkit.scale.pool import LocalPool

        return LocalPool(parse_devices(devices), setup=setup)
    return None


def run_all(pool, items: list[Item], on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Every item on ``pool`` (closed afterwards), or one after another in this process when ``pool`` is None;
    the outcomes in the order of ``items``. ``on_outcome`` sees each as it finishes (a progress bar, a checkpoint).
    In this process an item's exception becomes its failed outcome, as in a pool."""
    outs: list[Outcome | None] = [None] * len(items)
    if pool is None:
        for i, item in enumerate(items):
            t0 = time.perf_counter()
            try:
                out = Outcome(i, item.key, True, item.call())
            except Exception as exc:  # noqa: BLE001 - the item's failure is its outcome
                out = Outcome(i, item.key, False, error=first_line(exc))
            out.seconds, out.worker = time.perf_counter() - t0, "serial"
            outs[i] = out
            if on_outcome:
                on_outcome(out)
        return outs
    with pool:
        for out in pool.map_unordered(items):
            outs[out.index] = out
            if on_outcome:
                on_outcome(out)
    return outs


__all__ = ["open_pool", "run_all", "Item", "Call", "Outcome", "Bundle", "WorkerState", "DeviceSlot", "pack", "unpacked",
           "worker_state", "device_identity", "cpu_identity", "parse_devices"]  # fmt: skip
