"""``solkit bench --devices ... | --ray ...``: the suite's workloads spread over a pool of devices.

One item per (problem, workload): every backend of a workload runs on the same card, so a row's
``speedup_vs_eager`` is a ratio of two times from one card, and the workload's fp64 reference is computed
once. Each worker first calibrates its own device (cached per device UUID, see
:func:`solkit.hardware.calibrate.get_calibration`) and scores its rows against that card's own ceilings.
The rows come back in any order and are put in the serial run's order; an item lost twice to a dying
worker becomes one ``error`` row per backend, as a failed reference does.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from solkit.scale import Bundle, Call, Item, device_identity, pack, unpacked, worker_state

_CEILINGS: dict[str, Any] = {}  # this worker's ceilings, by basis (set by worker_setup)
_PROBLEMS: dict[str, Any] = {}  # this worker's loaded problems, by directory or bundle digest (see problem_once)


def device_ceilings(device: str, recalibrate: bool, notes: list[str], quick: bool = False,
                    not_before: str | None = None):  # fmt: skip
    """(device info, calibration, {basis: Ceilings}) of ``device``: its datasheet peaks and its calibrated ceilings."""
    from solkit.hardware.calibrate import get_calibration
    from solkit.hardware.detect import detect_device
    from solkit.sol.ceilings import calibrated_ceilings, spec_ceilings

    info = detect_device(device)
    out = {}
    if info.arch_id:
        out["spec"] = spec_ceilings(info.arch_id)
    else:
        notes.append(f"{info.name} is not in the hardware database: no datasheet (spec) basis")
    cal = get_calibration(recalibrate=recalibrate, quick=quick, info=info, not_before=not_before)
    if cal.quick:
        notes.append("the calibrated basis comes from a QUICK calibration (rough); `solkit calibrate --recalibrate`")
    out["calibrated"] = calibrated_ceilings(cal=cal, info=info)
    notes.extend(out["calibrated"].notes)
    return info, cal, out


def worker_setup(recalibrate: bool, quick: bool, not_before: str) -> dict[str, Any]:
    """Runs once in each worker: calibrate the worker's device (a recalibration shared by workers of one device
    happens once: ``not_before``) and keep its ceilings for the items."""
    times = {"setup_entered": time.time()}
    import torch

    times["torch_imported"] = time.time()
    import solkit.bench.runner  # noqa: F401 - the items' own imports, here while the caller still prepares

    times["modules_imported"] = time.time()
    notes: list[str] = []
    state = worker_state()
    info, cal, ceilings = device_ceilings(state.device, recalibrate, notes, quick=quick, not_before=not_before)
    times["calibration_read"] = time.time()
    _CEILINGS.clear()
    _CEILINGS.update(ceilings)
    return {"info": info.to_dict(), "ceilings": {k: c.to_dict() for k, c in ceilings.items()},
            "calibration": {"timestamp": cal.timestamp, "quick": cal.quick}, "notes": notes,
            "torch_threads": torch.get_num_threads(), "times": times}  # fmt: skip


def problem_once(source):
    """The problem at ``source`` (a directory or a :class:`Bundle`), loaded once per process, as a serial run loads
    each problem once for all its workloads: a worker's items of one problem share it (its reference module, and
    whatever is cached on it) instead of loading it again per item."""
    from solkit.problems.loader import load_problem

    key = f"bundle:{source.digest}" if isinstance(source, Bundle) else f"dir:{Path(source).resolve()}"
    problem = _PROBLEMS.get(key)
    if problem is None:
        problem = _PROBLEMS[key] = load_problem(unpacked(source))
    return problem


def bench_item(problem_src, workload_uuid: str, cfg) -> list[dict[str, Any]]:
    """One workload on this worker's device, every backend; rows as dicts."""
    import torch

    from solkit.bench.runner import run_workload

    problem = problem_once(problem_src)
    workload = next(w for w in problem.workloads if w.uuid == workload_uuid)
    cfg = dataclasses.replace(cfg, device=worker_state().device)
    rows = [r.to_dict() for r in run_workload(problem, workload, cfg, _CEILINGS)]
    if cfg.device.startswith("cuda"):  # as the serial run_suite does after each workload
        torch.cuda.empty_cache()
    return rows


def setup_call(recalibrate: bool, quick: bool) -> Call:
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    return Call(worker_setup, (recalibrate, quick, now))


def run_pooled(pool, cfg, chosen: list, on_rows: Callable[[int, int, list[dict], float], None] | None = None):
    """Every chosen (problem, workload) on ``pool``; returns (rows in the serial order, devices, failed items).

    A local pool reads the problem from its directory; a Ray pool gets it as a bundle (one object per problem).
    """
    from solkit.bench.runner import BACKENDS, Row, row_base

    sources: dict[str, Any] = {}
    items = []
    for problem, workload in chosen:
        d = str(Path(problem.definition_path).parent)
        if d not in sources:
            sources[d] = pack(d) if pool.kind == "ray" else d
        items.append(Item((problem.definition.name, workload.uuid), Call(bench_item, (sources[d], workload.uuid, cfg))))
    results: list[list[dict] | None] = [None] * len(items)
    failed = []
    for n, out in enumerate(pool.map_unordered(items), 1):
        if out.ok:
            rows = out.value
        else:
            problem, workload = chosen[out.index]
            base = {**row_base(problem, workload, None), "device_uuid": out.device.get("uuid"),
                    "device_name": out.device.get("name")}  # fmt: skip
            msg = f"lost to its worker: {out.error}"
            rows = [Row(**base, backend=b, status="error", error=msg).to_dict() for b in cfg.backends or BACKENDS]
            failed.append({"item": list(out.key), "error": out.error, "attempts": out.attempts})
        results[out.index] = rows
        if on_rows:
            on_rows(n, len(items), rows, out.seconds)
    return [r for rows in results for r in rows or []], pool.devices(), failed


def pooled_meta(devices: list[dict[str, Any]]) -> dict[str, Any]:
    """The meta fields a pooled run takes from its first device (the report's header), and every device's."""
    if not devices:
        return {}
    first = devices[0]["setup"]
    per = [{"worker": d["worker"], **d["identity"], "calibration": d["setup"]["calibration"],
            "ceilings": d["setup"]["ceilings"], "arch": d["setup"]["info"].get("arch_id")}
           for d in devices]  # fmt: skip
    return {"device": first["info"], "arch": first["info"].get("arch_id"), "ceilings": first["ceilings"],
            "calibration": first["calibration"], "devices": per}  # fmt: skip


def serial_meta(device: str, info, cal, ceilings) -> dict[str, Any]:
    ceil = {k: c.to_dict() for k, c in ceilings.items()}
    calibration = {"timestamp": cal.timestamp, "quick": cal.quick}
    one = {"worker": device, **device_identity(device), "calibration": calibration, "ceilings": ceil,
           "arch": info.arch_id}  # fmt: skip
    return {"device": info.to_dict(), "arch": info.arch_id, "ceilings": ceil, "calibration": calibration,
            "devices": [one], "scale": {"mode": "serial", "workers": 1, "failed_items": []}}  # fmt: skip


def run_with_progress(pool, cfg, chosen, checkpoint, as_json: bool, notes: list[str]):
    """The workloads on the pool, a progress bar for people; (rows, the device part of meta)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from solkit.errors import SolkitError
    from solkit.output import console

    bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                   TimeElapsedColumn(), console=console, transient=True, disable=as_json)  # fmt: skip
    with pool, bar:
        task = bar.add_task(f"bench on {pool.kind} pool", total=len(chosen))
        rows, devices, failed = run_pooled(pool, cfg, chosen, on_rows=lambda n, total, new, seconds: (
            checkpoint(n, total, new, seconds), bar.update(task, completed=n)))  # fmt: skip
    if not devices:
        raise SolkitError("no worker of --devices/--ray could start: " + "; ".join(r["error"] for r in failed[:1]))
    meta = pooled_meta(devices)
    for d in devices:
        notes.extend(n for n in d["setup"]["notes"] if n not in notes)
    meta["torch_threads"] = devices[0]["setup"].get("torch_threads")
    meta["scale"] = {"mode": pool.kind, "workers": len(devices), "failed_items": failed}
    if hasattr(pool, "phases"):  # when the pool's steps happened (workers or actors, first item; Ray: idle gaps)
        phases = pool.phases()
        for d in devices:  # a local worker's setup, step by step (torch imported, the items' modules, calibration)
            if d["worker"] in phases.get("actors", {}):
                phases["actors"][d["worker"]].update(d["setup"].get("times") or {})
        meta["scale"]["pool"] = phases
    return rows, meta
