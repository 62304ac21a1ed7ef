"""The model jobs' summaries share one loop: each named run's ``results.json`` under the job's folder goes to the
job's own printer; a run that wrote none, or whose summary fails, is one line, and the others go on.

A job's summary (a heredoc run from the repository root) imports it with
``sys.path.insert(0, "benchmarks/gpu_jobs"); from model_runs import job_summary, each_results``.

:func:`model_summary` is the whole summary of a job of `solkit model` runs on one model (model_llama, model_vision):
per run the attributed share, sum of T_SOL against measured, measured against wall and the ranked top operators;
the FLOPs of three convolutions counted by hand where the model has them; the top-5 stability of each pair of runs;
and the GEMM check (``check.json`` of `solkit model-check`) where the job ran one. It also runs as a script on a
results folder: ``python3 benchmarks/gpu_jobs/model_runs.py JOB OUT RUN... [--pair A:B]... [--check]``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def job_summary(job: str, **extra: Any) -> dict[str, Any]:
    """The summary's head: the job, the tree's commit (the device copy's, see the results READMEs), its runs."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"job": job, "commit": commit or "unknown", "runs": {}, **extra}


def each_results(out: Path, runs: Iterable[str], one_run: Callable[[str, dict[str, Any]], None]) -> None:
    """``one_run(run, results)`` for every run of ``runs`` that wrote ``out/run/results.json``."""
    for run in runs:
        f = out / run / "results.json"
        if not f.exists():
            err = out / run / "stderr.txt"
            print(f"{run}: no results ({err.read_text()[-300:] if err.exists() else 'not run'})")
            continue
        try:
            one_run(run, json.loads(f.read_text()))
        except Exception as exc:  # noqa: BLE001 - one bad file does not stop the summary
            print(f"{run}: summary failed: {type(exc).__name__}: {exc}")


def f3(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def run_record(d: dict[str, Any]) -> dict[str, Any]:
    """What the job's summary keeps of one run's results.json: its summary (less the ranking), where and when it
    ran, its top-10 operators and its categories."""
    s, m = d["summary"], d["meta"]
    ops = ("name", "category", "calls", "time_ms", "t_sol_ms", "sol_fraction", "lost_ms_median", "lost_ms_min",
           "lost_ms_max", "rank_label")  # fmt: skip
    return {"summary": {k: v for k, v in s.items() if k != "ranking"}, "device": m["device"], "date": m["date"],
            "versions": m["versions"], "command": m.get("command"), "steps_measured_ms": m.get("steps_measured_ms"),
            "steps_wall_ms": m.get("steps_wall_ms"), "telemetry": m.get("telemetry"), "notes": m.get("notes"),
            "top10": [{k: o.get(k) for k in ops} for o in d["ops"][:10]],
            "categories": [{k: g[k] for k in ("name", "time_ms", "t_sol_ms", "sol_fraction", "lost_ms")}
                           for g in d["categories"]]}  # fmt: skip


def print_run(run: str, d: dict[str, Any], top: int = 6) -> None:
    """The goals of one run (attributed share, sum of T_SOL <= measured <= wall, overhead) and its top operators."""
    s, m = d["summary"], d["meta"]
    print(f"== {run}: {m['model']} on {m['device'].get('name')} ({m['date']}), {s.get('steps_profiled')} steps")
    print(
        f"   measured {s['measured_ms']:.2f} ms (wall {s['wall_ms']:.2f}; measured <= wall: "
        f"{s.get('measured_le_wall')}); steps measured {[round(x, 2) for x in m.get('steps_measured_ms') or []]}"
    )
    print(
        f"   sum T_SOL {s['t_sol_ms']:.2f} ms; step SOL {s['step_sol']:.3f}; sum T_SOL <= measured: "
        f"{s['sum_t_sol_le_measured']}; attributed {s['attributed_share']:.2%} (goal 95 %); analysis overhead "
        f"{s['analysis_overhead_s']:.1f} s (goal: one step + 30 s)"
    )
    for o in d["ops"][:top]:
        print(
            f"   {o['rank_label']:>3} {o['name'][:70]:70s} [{o['category']}] lost {f3(o['lost_ms_median'])} ms "
            f"({f3(o['lost_ms_min'])}-{f3(o['lost_ms_max'])}), T_SOL {f3(o['t_sol_ms'])}, "
            f"SOL {f3(o['sol_fraction'])}"
        )


def conv_checks(d: dict[str, Any], n: int = 3) -> list[dict[str, Any]]:
    """The FLOPs of the first ``n`` forward convolutions (by time lost) against 2 x N x C_out x H_out x W_out x C_in
    x kh x kw per call, by hand from the operator's input shapes and output shape (groups 1, as in ResNet); printed.
    Empty for a model without convolutions."""
    checks = []
    for o in [o for o in d["ops"] if o["name"].startswith("convolution ") and o.get("out_shape")][:n]:
        (batch, cin, _, _), (cout, _, kh, kw) = [tuple(int(x) for x in t.strip("[]").split(","))
                                                 for t in o["shapes"].split(" x ")[:2]]  # fmt: skip
        hand = 2 * batch * cout * o["out_shape"][2] * o["out_shape"][3] * cin * kh * kw * o["calls"]
        checks.append({"op": o["name"], "out": o["out_shape"], "flops": o["flops"], "by_hand": hand,
                       "equal": o["flops"] == hand})  # fmt: skip
        print(f"   conv check {o['name']}: counted {o['flops']:.6g}, by hand {hand:.6g}, equal {o['flops'] == hand}")
    return checks


def print_stability(rankings: dict[str, list], pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The top-5 stability of each pair of runs that both ranked (solkit.model.ranking.top_stability: equal up to
    ties measured within each run), keyed by the pair's first run less its ``_1``; printed."""
    from solkit.model.ranking import top_stability

    out = {}
    for a, b in pairs:
        if rankings.get(a) and rankings.get(b):
            key = a.removesuffix("_1")
            st = out[key] = top_stability(rankings[a], rankings[b], 5)
            print(
                f"top-5 {key}: STABLE {st['stable']} (same order {st['same_order']}, same set {st['same_set']}); "
                f"swapped {st['swapped']} (not tied: {st['swapped_not_tied']}); reordered not tied "
                f"{st['reordered_not_tied']}"
            )
        else:
            print(f"top-5 {a} / {b}: not compared (a run has no ranking)")
    return out


def _mhz(row: dict[str, Any] | None) -> Any:
    return ((row or {}).get("clock") or {}).get("sm_clock_mhz")


def _step_mhz(x: dict[str, Any]) -> str:
    """The step's SM clock of a GEMM row; ``~`` marks an estimate from the nearest NVML sample."""
    c = x.get("model_clock") or {}
    return f"{'~' if c.get('nearest') else ''}{c.get('sm_clock_mhz')}"


def _share(s: dict[str, Any], key: str) -> str:
    sh = s.get(key)
    return f"{sh['within']}/{sh['compared']} (worst {f3(sh['worst_ratio'])})" if sh else "- (not in this check)"


def print_gemm_check(run: dict[str, Any]) -> dict[str, Any]:
    """One run of `solkit model-check --json`: the shares within 5 % per timing, at face value and at equal SM
    clocks (the verdict is the burst at face value), and every row; returns what the summary keeps."""
    s = run["summary"]
    judged = f"judged on {s.get('judged_on')} at face value"
    print(f"== model-check of {run['results']} (duty {f3(s.get('duty'))}, {judged})")
    for label, b, lay in (("sustained", "bench", "layout"), ("burst", "bench_burst", "layout_burst")):
        print(
            f"   {label}: gemm_bf16 within 5 % {_share(s, b)}, layout {_share(s, lay)}; "
            f"T_SOL agrees {s['t_sol_agrees']}"
        )
        est = (s.get(f"{b}_per_clock") or {}).get("clock_estimated")
        print(
            f"   {label} at equal SM clocks: gemm_bf16 {_share(s, f'{b}_per_clock')}, layout "
            f"{_share(s, f'{lay}_per_clock')}" + (f"; {est} step clock(s) from the nearest sample" if est else "")
        )
    for x in run["rows"]:
        b, bb = x.get("bench") or {}, x.get("bench_burst") or {}
        pw = lambda r: (r.get("clock") or {}).get("power_w")  # noqa: E731
        print(
            f"   {x['name'][:52]:52s} x{x['calls']:<2} model {x['model_ms_per_call']:.3f} ms SOL {f3(x['model_sol'])}"
            f" | sust {f3(b.get('ms'))} ratio {f3(x.get('ratio'))} | burst {f3(bb.get('ms'))} gap "
            f"{f3(x.get('burst_gap_ms'))} ratio {f3(x.get('ratio_burst'))} {x.get('within_burst')} per clock "
            f"{f3(x.get('ratio_burst_per_clock'))} {x.get('within_burst_per_clock')} | layout sust "
            f"{f3(x.get('layout_ratio'))} burst {f3(x.get('layout_ratio_burst'))} | MHz {_step_mhz(x)}"
            f"/{_mhz(b)}/{_mhz(bb)} W {pw(b)}/{pw(bb)}"
        )
    return {"summary": s, "rows": run["rows"]}


def model_summary(out: Path, job: str, runs: tuple[str, ...], pairs: tuple[tuple[str, str], ...] = (),
                  check: bool = False) -> dict[str, Any]:  # fmt: skip
    """The summary of a job of `solkit model` runs under ``out``: each run's goals and top operators, three
    convolutions' FLOPs by hand where it has them, the top-5 stability of each pair, the GEMM check (``check``:
    ``out/check.json``); written to ``out/summary.json`` and returned. One failing part is one line."""
    summary = job_summary(job, stability={})
    rankings: dict[str, list] = {}

    def one_run(run: str, d: dict[str, Any]) -> None:
        rankings[run] = d["summary"].get("ranking") or []
        r = summary["runs"][run] = run_record(d)
        print_run(run, d)
        if checks := conv_checks(d):
            r["conv_checks"] = checks

    each_results(out, runs, one_run)
    try:
        summary["stability"] = print_stability(rankings, pairs)
    except Exception as exc:  # noqa: BLE001 - the rest of the summary still prints
        print(f"stability: failed: {type(exc).__name__}: {exc}")
    if check:
        _gemm_check(out, summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"wrote {out / 'summary.json'}")
    return summary


def _gemm_check(out: Path, summary: dict[str, Any]) -> None:
    chk = out / "check.json"
    try:
        if chk.exists() and chk.stat().st_size:
            c = json.loads(chk.read_text())
            summary["check_meta"] = c["meta"]
            for run in c["runs"]:
                summary["gemm_check"] = print_gemm_check(run)
        else:
            err = out / "check_stderr.txt"
            print(f"model-check: no results ({err.read_text()[-300:] if err.exists() else 'not run'})")
    except Exception as exc:  # noqa: BLE001 - the runs' summary is still written
        print(f"model-check summary failed: {type(exc).__name__}: {exc}")


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(description="the summary of a job of `solkit model` runs (see the module's doc)")
    p.add_argument("job")
    p.add_argument("out", type=Path)
    p.add_argument("runs", nargs="+")
    p.add_argument("--pair", action="append", default=[], help="A:B, two runs whose top-5 should agree")
    p.add_argument("--check", action="store_true", help="also the GEMM check in OUT/check.json")
    a = p.parse_args(argv)
    pairs = tuple(tuple(x.split(":", 1)) for x in a.pair)
    model_summary(a.out, a.job, tuple(a.runs), pairs, a.check)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
