"""``solkit model-check``: the GEMMs of a measured model step, timed again as ``solkit bench`` times them.

``solkit model`` times each GEMM inside the step (the profiler's kernel time, next to its neighbours' cache
state); ``solkit bench`` times a GEMM alone (median of reps x trials, L2 flushed between calls, a pool of input
sets, CUDA graphs under 100 us). This command takes the distinct GEMM calls a model run recorded
(``results.json``'s ``gemms``: shapes, operand layouts, dtype, time per call, T_SOL) and times each one through
the bench's own per-workload protocol (:func:`solkit.bench.runner.run_workload`), on the model run's own
ceilings, in two ways:

* **bench**: the suite's ``gemm_bf16`` problem (``y = x @ w.T``) at the call's (M, K, N) on the ``vendor``
  backend, which is what ``solkit bench --ops gemm_bf16`` measures at that shape (its dtype set to the model's);
* **layout**: the same protocol on the call exactly as the model made it: ``mm``/``addmm``/``bmm`` with each
  operand stored as the model's was (column-major where it was transposed), timed on the ``eager`` backend
  (the reference itself, the same aten call). It is the bench row itself where the layouts are the bench's.

Each is timed in two power states, labelled:

* **sustained**: the bench's calls back to back (each behind an L2 flush), as ``solkit bench`` runs them. A large
  GEMM held for seconds draws the card to its power cap, and the SM clock drops (an H200 at 700 W: 1440-1500 MHz);
* **burst** (step-matched): the same protocol with the GPU idle before every call (``cooldown_ms``), so that the
  GEMM takes the share of the time it took in the step: the gap is the model's time per call x (1 - d) / d, with d
  the step's GEMM duty (its GEMM kernel time over its wall time; ``--duty`` sets it). Inside a step GEMMs alternate
  with other work and the card holds a higher clock; the burst timing reproduces that duty cycle. The timing
  method is then the CUPTI kernel span (the profiler's kernel time, the quantity the step's times are).

Per call it reports the SOL fractions and their ratio to the model's (within ``--tolerance``, 5 %, or not) in both
states, with the SM clock and power NVML sampled in the step and in each bench row, and each ratio also at equal SM
clocks (:mod:`solkit.bench.model_check_compare`); issue 21's 5 % goal is judged on the burst (step-matched)
comparison at face value, the burst at equal SM clocks stated beside it. It writes the comparison into each
``results.json`` as ``bench_check`` (rebuilding ``report.html`` beside it).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from solkit.bench.model_check_compare import (  # noqa: F401 - per_clock: importable from here
    TOLERANCE,
    burst_gap_ms,
    compare,
    is_bench_layout,
    per_clock,
    step_duty,
)
from solkit.errors import SolkitError
from solkit.output import console, err_console, jsonable, print_json, table

HELP = "time the GEMMs of a `solkit model` run with solkit bench's protocol and compare the SOL fractions"
#: The bench's GEMM problem; its eager backend runs a problem's reference as given, which the layout rows use.
BENCH_PROBLEM = "gemm_bf16"
#: What a bench row keeps of its timing record.
TIMING_KEYS = ("median_ms", "min_ms", "q1_ms", "q3_ms", "cv", "method", "reps", "trials", "l2_flushed",
               "rotating_buffers", "cooldown_ms")  # fmt: skip
#: Power states timed by default: back to back, and with idle gaps at the step's GEMM duty.
TIMINGS = ("sustained", "burst")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "model-check",
        help=HELP,
        description="Time every distinct GEMM of one or more `solkit model` runs (their results.json) with "
        "solkit bench's protocol, on the model run's ceilings: the suite's gemm_bf16 on the vendor backend at the "
        "same M, K, N, and the call as the model made it (its operand layouts, on the eager backend). Reports the "
        "model's SOL fraction, the bench's, their ratio and whether it is within the tolerance, and writes the "
        "comparison into each results.json (and report.html beside it).",
    )
    p.add_argument("results", nargs="+", help="results.json of `solkit model --html DIR` (or DIR)")
    p.add_argument("--device", default=None, help="cuda:N or cpu (default: the kind of device the model ran on)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per trial (default: the bench's)")
    p.add_argument("--tolerance", type=float, default=TOLERANCE, help="agreement asked of the ratio (default 0.05)")
    p.add_argument("--no-layout", dest="layout", action="store_false",
                   help="time only the bench's gemm_bf16 rows, not the calls in the model's own layouts")  # fmt: skip
    p.add_argument("--timing", choices=["both", *TIMINGS], default="both",
                   help="sustained (back to back, as solkit bench), burst (idle gaps at the step's GEMM duty), or "
                   "both (default); the 5 %% goal is judged on burst")  # fmt: skip
    p.add_argument("--duty", type=float, default=None,
                   help="the burst timing's duty cycle (0-1; default: a run's GEMM time / step wall)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=_cmd)


def _results_path(arg: str) -> Path:
    p = Path(arg)
    p = p / "results.json" if p.is_dir() else p
    if not p.is_file():
        raise SolkitError(f"{arg}: no results.json of `solkit model` here")
    return p


def _load(path: Path) -> dict[str, Any]:
    try:
        d = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SolkitError(f"{path}: not a readable JSON file ({type(exc).__name__})") from None
    for key in ("meta", "gemms", "ceilings"):
        if key not in d:
            why = "written before solkit model recorded its GEMMs; run it again" if key == "gemms" else "not one"
            raise SolkitError(f"{path}: no `{key}`: not a results.json of `solkit model` ({why})")
    return d


def _ceilings(d: dict[str, Any]):
    from solkit.sol.model import Ceilings

    c = d["ceilings"]
    return Ceilings(c["arch"], c["basis"], dict(c["flops"]), float(c["bandwidth"]))


def _storage(g: dict[str, Any], which: str) -> tuple[list[str], str]:
    """Axis names of an operand as stored, and the code that views it as the call's operand: transposed where the
    model's was column-major, and expanded from one element where the model's had a 0 stride (a broadcast, such as
    the gradient of a sum)."""
    rows, cols = ("m", "k") if which == "a" else ("k", "n")
    dims = (["batch"] if g["op"] == "bmm" else []) + [rows, cols]
    stride = g.get(f"{which}_stride") or []
    if len(stride) == len(dims):
        dims = ["1" if st == 0 else d for d, st in zip(dims, stride)]
    code = which
    if g[f"{which}_transposed"]:
        dims[-2:] = dims[-1], dims[-2]
        code += ".transpose(-2, -1)"
    if "1" in dims:
        code += f".expand({', '.join(str(x) for x in g[f'{which}_shape'])})"
    return dims, code


def layout_problem(g: dict[str, Any]):
    """The bench's GEMM problem with its reference made the model's call: same op, operands stored as the model's."""
    from solkit.problems.loader import Problem
    from solkit.problems.schema import Definition

    a_dims, a = _storage(g, "a")
    b_dims, b = _storage(g, "b")
    inputs = {"a": {"shape": a_dims, "dtype": g["dtype"]}, "b": {"shape": b_dims, "dtype": g["dtype"]}}
    out = (["batch"] if g["op"] == "bmm" else []) + ["m", "n"]
    call = {"mm": f"torch.mm({a}, {b})", "bmm": f"torch.bmm({a}, {b})", "addmm": f"torch.addmm(bias, {a}, {b})"}
    params = "a, b"
    if g["op"] == "addmm":
        bias = g["bias_shape"] or [g["n"]]
        names = {g["m"]: "m", g["n"]: "n"}
        inputs = {"bias": {"shape": [names.get(x, str(x)) for x in bias], "dtype": g["dtype"]}, **inputs}
        params = "bias, a, b"
    axes = {n: {"type": "var"} for n in (["batch"] if g["op"] == "bmm" else []) + ["m", "k", "n"]}
    d = {
        "name": BENCH_PROBLEM,
        "op_type": "gemm",
        "description": f"{g['op']} {g['layout']} as the model called it",
        "axes": axes,
        "inputs": inputs,
        "outputs": {"c": {"shape": out, "dtype": g["dtype"]}},
        "reference": f"import torch\n\n\ndef run({params}):\n    return {call[g['op']]}\n",
        "solkit": {"mode": "fwd"},
    }
    return Problem(Definition.model_validate(d), [])


def _workload(uid: str, axes: dict[str, int], names: tuple[str, ...]):
    from solkit.problems.schema import Workload

    return Workload.model_validate({"uuid": uid, "axes": axes, "inputs": {n: {"type": "random"} for n in names}})


class Timer:
    """Times GEMM rows through the bench's protocol, once per distinct row (several model runs share them)."""

    def __init__(self, device: str, ceilings, reps: int | None, progress=None):
        from solkit.bench.runner import SUITE_ROOT
        from solkit.problems.loader import load_problem

        self.device, self.ceilings, self.reps, self.progress = device, ceilings, reps, progress
        self.suite_gemm = load_problem(SUITE_ROOT / BENCH_PROBLEM)
        self.done: dict[tuple, dict[str, Any]] = {}

    def gemm(self, dtype: str):
        """The suite's gemm_bf16 in ``dtype``: its definition's dtypes set, not the bench's ``--dtype`` override,
        because that override casts the inputs but leaves the analysis (bytes, math unit) on the definition's."""
        from solkit.problems.loader import Problem
        from solkit.problems.schema import Definition

        if dtype == "bfloat16":
            return self.suite_gemm
        d = self.suite_gemm.definition.model_dump(mode="json", exclude_none=True)
        for spec in (*d["inputs"].values(), *d["outputs"].values()):
            spec["dtype"] = dtype
        return Problem(Definition.model_validate(d), [])

    def _run(self, problem, workload, backend: str, gap_ms: float = 0.0) -> dict[str, Any]:
        from solkit.bench.runner import BenchConfig, run_workload

        cfg = BenchConfig(device=self.device, backends=(backend,), reps=self.reps, cooldown_ms=gap_ms)
        basis = self.ceilings.basis
        with self._sampler() as tel:
            row = run_workload(problem, workload, cfg, {basis: self.ceilings})[0]
        end = time.monotonic()
        t_sol_ms = getattr(row, f"t_sol_ms_{basis}")
        return {
            "clock": _timed_clock(tel, end, row.timing),
            "backend": backend,
            "status": row.status,
            "error": row.error,
            "ms": row.ms,
            "t_sol_ms": t_sol_ms,
            "sol": getattr(row, f"sol_{basis}"),
            "sol_raw": t_sol_ms / row.ms if row.ms and t_sol_ms else None,
            "timing": {k: (row.timing or {}).get(k) for k in TIMING_KEYS},
        }

    def _sampler(self):
        """NVML samples while a row runs (a GPU only): the clock its timed calls ran at."""
        if not self.device.startswith("cuda"):
            return contextlib.nullcontext()
        from solkit.hardware.telemetry import TelemetrySampler
        from solkit.model.clocks import INTERVAL_S

        return TelemetrySampler(int(self.device.partition(":")[2] or 0), interval_s=INTERVAL_S)

    def bench(self, g: dict[str, Any], gap_ms: float = 0.0) -> dict[str, Any] | None:
        """The suite's gemm_bf16 (vendor) at the call's M, K, N, with ``gap_ms`` of GPU idle before every call; None
        for a batched call (gemm_bf16 is 2-D)."""
        if g["op"] == "bmm":
            return None
        key = ("bench", g["m"], g["k"], g["n"], g["dtype"], round(gap_ms, 3))
        if key not in self.done:
            if self.progress:
                self.progress(f"gemm_bf16 M={g['m']} K={g['k']} N={g['n']} ({g['dtype']}), vendor{_gap(gap_ms)}")
            axes = {"num_tokens": g["m"], "in_features": g["k"], "out_features": g["n"]}
            w = _workload(f"model-check-{g['m']}-{g['k']}-{g['n']}", axes, ("x", "w"))
            self.done[key] = {"problem": f"{BENCH_PROBLEM} (x @ w.T)",
                              **self._run(self.gemm(g["dtype"]), w, "vendor", gap_ms)}  # fmt: skip
        return self.done[key]

    def layout(self, g: dict[str, Any], gap_ms: float = 0.0) -> dict[str, Any]:
        """The call as the model made it (its op, operand layouts, bias), eager, through the same protocol."""
        if is_bench_layout(g) and g["bias_shape"] is None:
            return self.bench(g, gap_ms)
        key = ("layout", g["op"], tuple(g["a_shape"]), tuple(g["b_shape"]), g["a_transposed"], g["b_transposed"],
               tuple(g["bias_shape"] or ()), g["dtype"], round(gap_ms, 3))  # fmt: skip
        if key not in self.done:
            if self.progress:
                self.progress(f"{g['op']} {g['layout']} M={g['m']} K={g['k']} N={g['n']} ({g['dtype']}), eager"
                              f"{_gap(gap_ms)}")  # fmt: skip
            axes = {n: g[n] for n in ("batch", "m", "k", "n") if n != "batch" or g["op"] == "bmm"}
            names = ("bias", "a", "b") if g["op"] == "addmm" else ("a", "b")
            w = _workload(f"model-check-{'-'.join(str(v) for v in axes.values())}", axes, names)
            self.done[key] = {"problem": f"{g['op']} {g['layout']} (the model's call)",
                              **self._run(layout_problem(g), w, "eager", gap_ms)}  # fmt: skip
        return self.done[key]


def _gap(gap_ms: float) -> str:
    return f", burst ({gap_ms:.2f} ms idle before each call)" if gap_ms > 0 else ""


def _timed_clock(sampler, end: float, timing: dict | None) -> dict[str, Any] | None:
    """The SM clock and power over the samples of a row's timed calls: they run last, for about (reps x trials +
    the warm-up and the method's probe) calls of the median time before the row returns."""
    from solkit.model.clocks import StepClocks

    if sampler is None or not timing or not timing.get("median_ms"):
        return None
    span_s = (timing["reps"] * timing["trials"] + 8) * (timing["median_ms"] + (timing.get("cooldown_ms") or 0.0)) / 1e3
    laid = StepClocks([(s["t"] * 1e6, s) for s in sampler.samples if "t" in s])
    return laid.during([((end - span_s) * 1e6, end * 1e6)])


def _meta(device: str, started: str, reps: int | None) -> dict[str, Any]:
    from solkit.hardware.calibrate import versions
    from solkit.scale import device_identity

    return {
        "device": device_identity(device),
        "date": started,
        "versions": versions(),
        "command": "solkit model-check " + shlex.join(a for a in sys.argv[1:] if a != "model-check"),
        "protocol": "solkit bench's run_workload: inputs from the problem's generator, checked against a "
        f"higher-precision reference, then solkit.timing.benchmark (reps {reps or 'the bench default'} x 3 trials, "
        "L2 flushed, a pool of input sets, CUDA graphs under 100 us); sustained: calls back to back; burst: the GPU "
        "idle before every call for the model's time per call x (1 - duty) / duty (CUPTI kernel span); T_SOL on the "
        "model run's ceilings",
    }


def _device(arg: str | None, runs: list[tuple[Path, dict[str, Any]]]) -> str:
    """Where to time: ``--device``, else the kind of device the model runs were measured on; it must be theirs."""
    import torch

    kinds = {d["meta"].get("device", {}).get("kind") or "cpu" for _, d in runs}
    device = arg or ("cuda" if kinds == {"cuda"} else "cpu")
    if device != "cpu" and not device.startswith("cuda"):
        raise SolkitError(f"--device {device}: allowed cpu, cuda, cuda:N")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SolkitError(f"--device {device}: no CUDA device is available here")
    for p, d in runs:
        kind = d["meta"].get("device", {}).get("kind") or "cpu"
        if kind != device.split(":")[0]:
            raise SolkitError(f"{p}: measured on {kind}; time its GEMMs where the model ran, not on {device}")
    return device


def write_back(path: Path, d: dict[str, Any], check: dict[str, Any]) -> None:
    """The comparison into the model run's results.json (and its report.html, rebuilt, when one is beside it)."""
    from solkit.model.html import figures, html_page

    d["bench_check"] = check
    path.write_text(json.dumps(jsonable(d), indent=1, allow_nan=False))
    if (path.parent / "report.html").exists():
        (path.parent / "report.html").write_text(html_page(d, figures(d, path.parent)))


def _cmd(args: argparse.Namespace) -> int:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    if args.tolerance <= 0 or (args.reps is not None and args.reps < 1):
        raise SolkitError("--tolerance must be above 0 and --reps at least 1")
    if args.duty is not None:
        burst_gap_ms(0.0, args.duty)  # a duty out of (0, 1] is one line before anything is timed
    timings = TIMINGS if args.timing == "both" else (args.timing,)
    runs = [(p, _load(p)) for p in map(_results_path, args.results)]
    device = _device(args.device, runs)
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    out: dict[str, Any] = {"meta": _meta(device, started, args.reps), "runs": []}
    timers: dict[str, Timer] = {}  # one per basis: runs on the same ceilings share their timed rows
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True, disable=args.json) as bar:
        task = bar.add_task("timing GEMMs")
        for p, d in runs:
            ceil = _ceilings(d)
            key = json.dumps(ceil.to_dict(), sort_keys=True)
            if key not in timers:
                timers[key] = Timer(device, ceil, args.reps, lambda msg: bar.update(task, description=msg))
            duty = args.duty if args.duty is not None else step_duty(d)
            check = {**compare(d["gemms"], timers[key], args.tolerance, args.layout, timings, duty),
                     "meta": out["meta"]}  # fmt: skip
            write_back(p, d, check)
            out["runs"].append({"results": str(p), "model": d["meta"].get("model"),
                                "compile": d["meta"].get("compile"), **check})  # fmt: skip
    if args.json:
        print_json(out)
    else:
        for run in out["runs"]:
            print_check(run)
    return 0


def print_check(run: dict[str, Any]) -> None:
    """The comparison of one run as a table, its caption the shares within the tolerance in each timing."""
    from solkit.model.html import bench_check_rows

    cols, rows = bench_check_rows(run)
    s = run["summary"]
    mode = "torch.compile" if run.get("compile") else "eager"
    parts = []
    for label, bench, lay in (("sustained", "bench", "layout"), ("burst", "bench_burst", "layout_burst")):
        if label in s.get("timings", ["sustained"]):
            state = f" (step-matched, duty {s['duty']:.2f})" if label == "burst" else ""
            parts.append(f"{label}{state}: gemm_bf16 {_share(s[bench])}, the model's layout {_share(s[lay])}")
    if "burst" in s.get("timings", []) and "bench_burst_per_clock" in s:
        pc, lay_pc = s["bench_burst_per_clock"], s["layout_burst_per_clock"]
        est = pc.get("clock_estimated") or 0
        parts.append(f"burst at equal SM clocks: gemm_bf16 {_share(pc)}, the model's layout {_share(lay_pc)}"
                     + (f" ({est} step clock(s) from the nearest sample)" if est else ""))  # fmt: skip
    caption = (f"ratio = model SOL / bench SOL, within {run['tolerance']:.0%}: {'; '.join(parts)}; the goal is "
               f"judged on {s.get('judged_on', 'sustained')} at face value; ms per call")  # fmt: skip
    console.print(table(f"GEMMs of {run['model']} ({mode}) against solkit bench", cols, rows, caption=caption))
    if not s["t_sol_agrees"]:
        err_console.print("[yellow]warning:[/yellow] some bench rows have another T_SOL than the model's call "
                          "(another precision basis?); see t_sol_agrees in --json")  # fmt: skip


def _share(sh: dict[str, Any]) -> str:
    return f"{sh['within']}/{sh['compared']}"
