"""``solkit model --devices`` / ``--ray``: the same step measured on each device at once, and how far they differ.

A model's step is one unit of work: it runs on one device and is not split. What several devices give a user
is the step on each card at once, one pinned worker process per device (:mod:`solkit.scale`): the report is
the first device's, as a serial run writes it, and ``meta`` adds every run's step (time, Σ T_SOL, step SOL,
attributed share) and the card-to-card spread of the step and of each operator. Cards of one product differ
(issue 25: the 70B GEMM measured 4.96 ms on one H200 and 5.31 ms on another), so times are only compared
across cards as a spread, each run being scored against its own card's ceilings. A single device
(``--devices 3``) pins the analysis to that GPU. Runs on one card (``cpu,cpu``) share its identity: they are
listed per run, and the spread, which is between cards, has nothing to compare.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from solkit.errors import SolkitError
from solkit.model.report import ModelReport
from solkit.report.devices import card_spread
from solkit.scale import Call, Item, Outcome, device_identity, open_pool, parse_devices, run_all


def _run_entry(out: Outcome) -> dict[str, Any]:
    entry: dict[str, Any] = {"worker": out.worker, "device_uuid": out.device.get("uuid"),
                             "device_name": out.device.get("name"), "ok": out.ok, "seconds": out.seconds}  # fmt: skip
    if not out.ok:
        return {**entry, "error": out.error, "attempts": out.attempts}
    s = out.value.to_dict(top=0)["summary"]
    keep = ("measured_ms", "wall_ms", "t_sol_ms", "step_sol", "attributed_share", "top5_by_time_lost")
    return {**entry, **{k: s[k] for k in keep}}


def _op_rows(out: Outcome) -> list[dict[str, Any]]:
    """A run's operators as rows of :func:`solkit.report.devices.card_spread` (one backend: the step)."""
    rows = []
    for g in out.value.to_dict()["ops"]:
        if g["time_ms"] > 0:
            rows.append({"problem": g["name"], "backend": "step", "status": "ok", "ms": g["time_ms"],
                         "sol_spec": g["sol_fraction"], "device_uuid": out.device.get("uuid"),
                         "device_name": out.device.get("name")})  # fmt: skip
    return rows


def _spread(outs: list[Outcome], top: int) -> dict[str, Any]:
    """Step and operators timed on two or more cards: slowest / fastest - 1 (operators, the ``top`` widest)."""
    step = card_spread([{"rows": [{"problem": "step", "backend": "step", "status": "ok",
                                   "ms": o.value.measured_s * 1e3, "sol_spec": o.value.step_sol,
                                   "device_uuid": o.device.get("uuid"), "device_name": o.device.get("name")}]}
                        for o in outs])  # fmt: skip
    ops = card_spread([{"rows": _op_rows(o)} for o in outs])
    ops.sort(key=lambda r: r["ms_spread"], reverse=True)
    strip = ("size", "model", "backend", "workload")
    return {"step": [{k: v for k, v in r.items() if k not in strip} for r in step],
            "ops": [{"operator": r["problem"], **{k: v for k, v in r.items() if k not in strip + ("problem",)}}
                    for r in ops[:top]]}  # fmt: skip


def add_scale_meta(rep: ModelReport, outs: list[Outcome], mode: str, top: int) -> ModelReport:
    """``rep.meta``: the devices, every run's step, the failed runs and the card-to-card spread."""
    ok = [o for o in outs if o.ok]
    seen: dict[str, dict[str, Any]] = {}
    for o in outs:
        if o.device.get("uuid"):
            seen.setdefault(o.device["uuid"], {"uuid": o.device["uuid"], "name": o.device.get("name"), "runs": 0})
            seen[o.device["uuid"]]["runs"] += 1
    rep.meta["devices"] = list(seen.values())
    failed = [{"worker": o.worker, "error": o.error} for o in outs if not o.ok]
    rep.meta["scale"] = {"mode": mode, "workers": len(outs), "failed_items": failed}
    rep.meta["runs"] = [_run_entry(o) for o in outs]
    rep.meta["card_spread"] = _spread(ok, top) if len(ok) > 1 else {"step": [], "ops": []}
    return rep


def serial_report(rep: ModelReport, device: str, seconds: float, top: int) -> ModelReport:
    """A run in this process, with the same ``meta`` a ``--devices`` run has (one run, no spread)."""
    out = Outcome(0, ("0",), True, rep, device=dict(device_identity(device)), worker="serial", seconds=seconds)
    return add_scale_meta(rep, [out], "serial", top)


def on_devices(
    spec: str | None, call: Call, top: int, on_outcome: Callable[[Outcome], None] | None = None, ray: str | None = None
) -> ModelReport:
    """``call`` (an analysis returning a :class:`ModelReport`) once on every device of ``spec``, or on every actor
    Ray places with ``ray`` (one per GPU of the cluster; ``spec`` ``cpu:N`` asks for N CPU actors); the first
    device's report (the first that succeeded), with every run in its ``meta``."""
    pool = open_pool(spec, ray)
    try:
        pool.start()  # every worker ready before the items go out: one run per device
    except BaseException:
        pool.close()
        raise
    n = len(pool.devices()) if ray else len(parse_devices(spec))
    if not n:
        pool.close()
        raise SolkitError(f"--ray {ray}: no actor started on the cluster (docs/scale.md)")
    outs = run_all(pool, [Item((str(i),), call) for i in range(n)], on_outcome=on_outcome)
    ok = [o for o in outs if o.ok]
    flag = f"--ray {ray}" if ray else f"--devices {spec}"
    if not ok:
        raise SolkitError(f"{flag}: no run succeeded ({outs[0].worker or 'worker'}: {outs[0].error})")
    return add_scale_meta(ok[0].value, outs, "ray" if ray else "local", top)
