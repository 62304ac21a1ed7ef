"""``solkit bench`` (the main job) and ``solkit report``."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError
from solkit.output import console, print_json, table, warn

CPU_DEFAULT_BACKENDS = ("eager", "vendor")  # torch.compile costs ~10 s per problem on a 2-core CPU


def _csv(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="the main job: the built-in suite on every backend, a SOL table and report")
    p.add_argument("--size", default=None, help="size class s|m|l, comma-separated (default: s on CPU, l on GPU)")
    p.add_argument("--ops", type=_csv, default=None, help="problems or op types, comma-separated")
    p.add_argument("--backends", type=_csv, default=None, help="eager,compile,vendor,liger,solkit (default: all)")
    p.add_argument("--mode", default=None, help="fwd | bwd | fwd_bwd (bwd runs the fwd_bwd problems)")
    p.add_argument("--models", type=_csv, default=None, help="only workloads from these models, e.g. llama3-8b")
    p.add_argument("--dtype", default=None, help="override the suite's floating dtype: bfloat16, float16, float32")
    p.add_argument("--device", default=None, help="cuda:N or cpu (default: cuda if present)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per trial (default 50 GPU, 5 CPU)")
    p.add_argument("--out", default=None, help="report directory (default ./solkit-results/<timestamp>)")
    p.add_argument("--list-backends", action="store_true", help="show which backends are available and exit")
    p.add_argument("--recalibrate", action="store_true", help="measure the device's ceilings again")
    p.add_argument("--calibration", choices=("full", "quick"), default="full",
                   help="full (default; a CPU measures STREAM-like bandwidth and GEMM peaks per dtype once, ~1 min, "
                        "cached) or quick (rough; labelled quick in every table and report)")  # fmt: skip
    p.add_argument("--profile", action="store_true", help="add Nsight Compute diagnoses (GPU, needs ncu)")
    p.add_argument("--compile-workers", type=int, default=None,
                   help="processes that compile the torch.compile rows before the timed run "
                        "(default: half the cores up to 8 on a GPU, 0 on a CPU)")  # fmt: skip
    p.add_argument("--what-if", dest="what_if", default=None, metavar="ARCH[,ARCH]",
                   help="also give every measured row's T_SOL, bound and tier on these products (analysis, from "
                        "their datasheets; see `solkit hw list`)")  # fmt: skip
    p.add_argument("--devices", default=None, metavar="all|0,1,3|cpu,cpu|cpu:N",
                   help="spread the workloads over these devices, one worker process each (docs/scale.md)")  # fmt: skip
    p.add_argument("--ray", default=None, metavar="auto|local|ADDRESS",
                   help="spread the workloads over a Ray cluster, one actor per GPU (needs solkit[ray])")  # fmt: skip
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench)

    r = sub.add_parser(
        "report",
        help="rebuild a report from saved results, or compare results files (same device: times; several "
        "devices: each row's own SOL per device and the spread)",
    )
    r.add_argument("results", help="results.json (or its directory)")
    r.add_argument("others", nargs="*", default=[], help="more results files to compare against")
    r.add_argument("--out", default=None, help="directory for the rebuilt report (default: beside RESULTS)")
    r.add_argument("--what-if", dest="what_if", default=None, metavar="ARCH[,ARCH]",
                   help="add the what-if section (T_SOL, bound, tier on these products) to the report")  # fmt: skip
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_report)


def _device(arg: str | None) -> str:
    import torch

    if arg is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if arg != "cpu" and not arg.startswith("cuda"):
        raise SolkitError(f"unknown device {arg!r}; allowed: cpu, cuda, cuda:N")
    if arg.startswith("cuda") and not torch.cuda.is_available():
        raise SolkitError(f"--device {arg}: no CUDA device is available here; use --device cpu")
    return arg


def _validate(args: argparse.Namespace, device: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...] | None]:
    from solkit.backends import BACKENDS
    from solkit.bench.runner import MODES, SIZES

    sizes = _csv(args.size) if args.size else (("s",) if device == "cpu" else ("l",))
    for s in sizes:
        if s not in SIZES:
            raise SolkitError(f"unknown size {s!r}; allowed: {', '.join(SIZES)}")
    backends = args.backends or (CPU_DEFAULT_BACKENDS if device == "cpu" else tuple(BACKENDS))
    for b in backends:
        if b not in BACKENDS:
            raise SolkitError(f"unknown backend {b!r}; allowed: {', '.join(BACKENDS)}")
    modes = None
    if args.mode:
        modes = _csv(args.mode)
        for m in modes:
            if m not in MODES:
                raise SolkitError(f"unknown mode {m!r}; allowed: {', '.join(MODES)}")
    if args.dtype and args.dtype not in ("bfloat16", "float16", "float32"):
        raise SolkitError(f"unknown dtype {args.dtype!r}; allowed: bfloat16, float16, float32")
    return sizes, backends, modes


def cmd_list_backends(device: str, as_json: bool) -> int:
    from solkit.backends import BACKENDS

    rows = []
    for b in BACKENDS.values():
        ok, why = b.available(device)
        rows.append(
            {
                "backend": b.name,
                "available": ok,
                "reason": why,
                "problems": sorted(b.impls),
                "description": b.description,
            }
        )
    if as_json:
        print_json(rows)
    else:
        console.print(
            table(
                f"backends on {device}",
                ["backend", "available", "problems", "why / what"],
                [
                    [
                        r["backend"],
                        r["available"],
                        len(r["problems"]),
                        r["reason"] if not r["available"] else r["description"],
                    ]
                    for r in rows
                ],
            )
        )
    return 0


def _ceilings(device: str, recalibrate: bool, notes: list[str], quick: bool = False):
    from solkit.bench.shards import device_ceilings

    return device_ceilings(device, recalibrate, notes, quick=quick)


def _pool(args: argparse.Namespace):
    """The pool of --devices / --ray (None: a serial run on --device)."""
    if not (args.devices or args.ray):
        return None
    if args.device:
        raise SolkitError("--device and --devices/--ray: give one (--devices names every device to use)")
    if args.profile:
        raise SolkitError("--profile runs on one device; leave out --devices/--ray")
    from solkit.bench.shards import setup_call
    from solkit.scale import open_pool

    return open_pool(args.devices, args.ray, setup=setup_call(args.recalibrate, args.calibration == "quick"))


def cmd_bench(args: argparse.Namespace) -> int:
    # Everything is written when _bench returns: the command line leaves without the interpreter's teardown (torch's,
    # and a joined Ray cluster's disconnect, which the cluster sees as this driver's end).
    args.exit_now = True
    pool = _pool(args)
    if pool is None:
        return _bench(args, None)
    pool.start(wait_ready=False)  # the workers start up while this process imports and selects the work
    try:
        return _bench(args, pool)
    finally:
        pool.close()


def _bench(args: argparse.Namespace, pool) -> int:
    # Long on purpose: one linear command (select, calibrate, run, write the report), read top to bottom.
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from solkit.bench.runner import BenchConfig, run_suite, select, suite_problems
    from solkit.bench.shards import run_with_progress, serial_meta
    from solkit.hardware.calibrate import versions
    from solkit.report.crossarch import product_ids, what_if_section
    from solkit.report.render import write_report

    started, started_at = time.perf_counter(), time.time()
    device = pool.device_kind if pool else _device(args.device)
    if args.list_backends:
        return cmd_list_backends(device, args.json)
    sizes, backends, modes = _validate(args, device)
    what_if = product_ids(args.what_if) if args.what_if else None
    notes: list[str] = []
    if device == "cpu" and not args.backends:
        notes.append(
            "CPU run: compile, liger and solkit backends are off by default (compile time; Triton "
            "kernels only run in the interpreter on a CPU); pass --backends to choose"
        )
    if args.mode and "bwd" in _csv(args.mode):
        notes.append("bwd problems are timed as forward + backward (fwd_bwd)")
    if args.profile and device == "cpu":
        notes.append("--profile needs a GPU and Nsight Compute; skipped on the CPU")
    cfg = BenchConfig(
        device=device,
        sizes=sizes,
        ops=args.ops,
        backends=backends,
        modes=modes,
        dtype=args.dtype,
        models=args.models,
        reps=args.reps,
    )
    chosen = select(suite_problems(), cfg)
    if not chosen:
        raise SolkitError("no suite problem matches --ops/--mode/--size; see src/solkit/problems/suite/")
    if pool is None:  # after the selection: a command that selects nothing fails before any measurement
        info, cal, ceilings = _ceilings(device, args.recalibrate, notes, quick=args.calibration == "quick")
    out = Path(args.out or Path("solkit-results") / dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    done: list = []
    warm = None
    if "compile" in backends and not (pool and pool.kind == "ray"):  # a Ray node keeps its own compile cache
        from solkit.bench.precompile import default_workers, precompile

        workers = default_workers(device) if args.compile_workers is None else max(args.compile_workers, 0)
        if workers:
            if not args.json:
                console.print(f"compiling the torch.compile rows in {workers} processes first ...")
            warm = precompile(chosen, device, args.dtype, workers)
            if warm["failed"]:
                notes.append(f"torch.compile warm-up: {len(warm['failed'])} workload(s) compile in the main process "
                             f"instead ({next(iter(warm['failed'].values()))})")  # fmt: skip

    timeline: list[dict[str, Any]] = []

    def checkpoint(i, n, new, seconds) -> None:
        # Rows so far, rewritten after every workload: a run that is killed keeps what it measured.
        done.extend(r if isinstance(r, dict) else r.to_dict() for r in new)
        (out / "results.partial.json").write_text(json.dumps(done, default=str))
        # Where a run's time goes (docs/scale.md): the workload's own seconds (in its worker) and when it came back.
        item = [done[-1]["problem"], done[-1]["workload"]] if new else None
        timeline.append({"item": item, "seconds": round(seconds, 3), "done_s": round(time.perf_counter() - started, 3)})

    if pool is not None:
        rows, dev_meta = run_with_progress(pool, cfg, chosen, checkpoint, args.json, notes)
    elif args.json:
        rows = run_suite(cfg, ceilings, on_row=checkpoint)
    else:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as prog:
            task = prog.add_task("bench", total=len(chosen))
            rows = run_suite(
                cfg,
                ceilings,
                progress=lambda m: prog.update(task, description=m),
                on_row=lambda i, n, new, s: (checkpoint(i, n, new, s), prog.update(task, completed=i)),
            )
    if pool is None:
        rows, dev_meta = [r.to_dict() for r in rows], serial_meta(device, info, cal, ceilings)
    results: dict[str, Any] = {
        "meta": {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": "solkit " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            "device": dev_meta["device"],
            "arch": dev_meta["arch"],
            "versions": versions(),
            "sizes": list(sizes),
            "backends": list(backends),
            "timing_policy": "median of reps x 3 trials after warm-up; GPU: CUDA events with the L2 flushed (read "
            "sweep of 2x L2) between reps and a rotating input pool, per-call events inside a CUDA graph for calls "
            "< 100 us; CPU: wall clock",
            "compile_warmup": warm,
            "ceilings": dev_meta["ceilings"],
            "calibration": dev_meta["calibration"],
            **_cpu_meta(device),
            "devices": dev_meta["devices"],
            "scale": {**dev_meta["scale"], "timeline": {"started_at": started_at, "items": timeline}},
            "notes": notes,
        },
        "rows": rows,
    }
    if dev_meta.get("torch_threads") and device == "cpu":
        results["meta"]["torch_threads"] = dev_meta["torch_threads"]
    if args.profile and device != "cpu":
        _add_diagnoses(results, notes, out)
    if what_if:
        results["what_if"] = what_if_section(results, what_if)
    # Wall time of the whole job up to here (detection, calibration, compile warm-up, every row).
    results["meta"]["elapsed_s"] = round(time.perf_counter() - started, 1)
    paths = write_report(results, out)
    (out / "results.partial.json").unlink(missing_ok=True)
    if args.json:
        print_json({"out": str(out), **{k: str(v) for k, v in paths.items()}, "rows": results["rows"],
                    **({"what_if": results["what_if"]} if what_if else {})})  # fmt: skip
    else:
        print_table(results)
        if what_if:
            print_what_if(results["what_if"])
        console.print(f"report: {paths['html']} (also {paths['markdown'].name}, results.json, results.csv)")
        console.print(f"done in {time.perf_counter() - started:.1f} s")
    for r in rows:
        if r["status"] in ("incorrect", "error"):
            warn(f"{r['problem']} [{r['size']}/{r['model']}] {r['backend']}: {r['status']}: {r['error']}")
    return 0


def _cpu_meta(device: str) -> dict[str, Any]:
    """On a CPU: its model name (not just the machine type) and the torch threads the run used."""
    if device != "cpu":
        return {}
    import torch

    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import platform

    return {"cpu_model": model or platform.processor() or platform.machine(), "torch_threads": torch.get_num_threads()}


def _add_diagnoses(results: dict[str, Any], notes: list[str], out: Path) -> None:
    """Nsight Compute diagnosis of every measured row, in one ncu run (solkit.profile's bench hook).

    The eager rows profile the problem's reference; the other backends profile the same callable the
    bench timed (``bench:<backend>``). Each diagnosis uses the bench's own median as T_measured.
    """
    from solkit.bench.runner import SUITE_ROOT

    try:
        from solkit.profile.bench_hook import diagnose_batch_for_bench
    except ImportError as exc:
        notes.append(f"--profile: solkit.profile is not usable here ({exc})")
        return
    measured = [r for r in results["rows"] if r["status"] == "ok" and r.get("ms")]
    items = [
        {
            "problem_dir": str(SUITE_ROOT / r["problem"]),
            "solution": None if r["backend"] == "eager" else f"bench:{r['backend']}",
            "workload": r["workload"],
            "t_measured_ms": r["ms"],
        }
        for r in measured
    ]
    try:
        diags = diagnose_batch_for_bench(items, out_dir=out / "profile")
    except Exception as exc:  # noqa: BLE001 - profiling must never sink the bench
        notes.append(f"--profile failed: {type(exc).__name__}: {exc}")
        return
    degraded = set()
    for row, d in zip(measured, diags):
        row["profile"] = {k: d.get(k) for k in ("summary", "roof", "dram_vs_model", "n_kernels", "findings")}
        row["profile_diagnosis"] = d.get("summary")
        degraded.update(d.get("degraded") or [])
    notes.extend(f"--profile degraded: {line}" for line in sorted(degraded))


#: Columns the terminal table leaves out below 120 columns (model, throughputs, spec basis, tier).
NARROW_DROP = ("model", "tflops", "tbs", "sol_spec", "tier")


def print_table(results: dict[str, Any]) -> None:
    from solkit.report.devices import by_device, card_spread, short, spread_table
    from solkit.report.render import COLUMNS, check_cell
    from solkit.report.verdict import LEGEND, basis_line, device_label

    # Under 120 columns the secondary columns go (results.csv and the report keep them), so rows stay one line.
    narrow = console.width < 120
    keep = [i for i, (k, _) in enumerate(COLUMNS) if not (narrow and k in NARROW_DROP)]
    m = results["meta"]
    groups = by_device(results["rows"])  # a run on several cards: one table per card
    for card, group in groups.items():
        rows = []
        for r in group:
            cells = [r.get(k) for k, _ in COLUMNS]
            cells[4] = check_cell(r)[: 40 if narrow else 60]
            rows.append([cells[i] for i in keep])
        on = f"{group[0].get('device_name')} [{short(card)}]" if len(groups) > 1 else device_label(m)
        console.print(
            table(
                f"solkit bench on {on}",
                [COLUMNS[i][1] for i in keep],
                rows,
                caption=f"{basis_line(m)}. SOL = T_SOL / T_measured. check: {', '.join(LEGEND)}. "
                + f"Timing: {m.get('timing_policy', 'not recorded')}",
            )
        )
    spread = card_spread([results])
    if spread:
        console.print(table("card-to-card spread of the same row", *spread_table(spread)))
    for n in m.get("notes", []):
        console.print(f"note: {n}")


def print_what_if(section: dict[str, Any]) -> None:
    from solkit.report.crossarch import what_if_rows

    cols, rows = what_if_rows(section)
    changed = sum(r["bound_changes"] for r in section["rows"])
    console.print(table(f"what-if on {', '.join(section['products'])} (analysis; measured on "
                        f"{section.get('measured_on') or 'this device'})", cols, rows,
                        caption=f"{section['note']}; {changed} of {len(rows)} rows change bound"))  # fmt: skip


def cmd_report(args: argparse.Namespace) -> int:
    from solkit.report.crossarch import product_ids, what_if_section
    from solkit.report.render import load_results, write_report

    what_if = product_ids(args.what_if) if args.what_if else None
    a = load_results(args.results)
    if args.others:
        return _compare(args, [a] + [load_results(o) for o in args.others])
    if what_if:
        a["what_if"] = what_if_section(a, what_if)
    out = (
        Path(args.out) if args.out else Path(args.results if Path(args.results).is_dir() else Path(args.results).parent)
    )
    paths = write_report(a, out)
    if args.json:
        print_json({k: str(v) for k, v in paths.items()})
    else:
        print_table(a)
        if what_if:
            print_what_if(a["what_if"])
        console.print(f"report: {paths['html']}")
    return 0


def _write_comparison(out: Path, names: list[str], rows: list[dict[str, Any]]) -> None:
    """``report a b --out DIR``: the comparison as comparison.json and comparison.csv."""
    import csv

    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps({"a": names[0], "b": names[1], "rows": rows}, indent=1))
    with (out / "comparison.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["problem"])
        w.writeheader()
        w.writerows(rows)
    console.print(f"comparison: {out / 'comparison.json'} (also comparison.csv)")


def _compare(args: argparse.Namespace, runs: list[dict[str, Any]]) -> int:
    """Two runs on one device: times side by side. Runs on several devices: each row's own SOL per device."""
    from solkit.report.crossarch import compare_devices, compare_devices_rows, device_labels, same_device
    from solkit.report.render import compare

    names = [args.results, *args.others]
    if len(runs) == 2 and same_device(runs):
        rows = compare(runs[0], runs[1])
        if args.out:
            _write_comparison(Path(args.out), names, rows)
        if args.json:
            print_json(rows)
        else:
            console.print(
                table(
                    f"{names[0]} (a) vs {names[1]} (b)",
                    ["problem", "size", "backend", "ms a", "ms b", "a/b", "95 % CI", "verdict"],
                    [
                        [
                            r["problem"],
                            r["size"],
                            r["backend"],
                            r["ms_a"],
                            r["ms_b"],
                            r["speedup_b_over_a"],
                            f"{r['ci95_low']:.3g}-{r['ci95_high']:.3g}" if r["ci95_low"] else "-",
                            r["verdict"],
                        ]
                        for r in rows
                    ],  # fmt: skip
                    caption="a/b > 1: b is faster. faster/slower only where the 95 % interval of the ratio (Welch t "
                    "on the per-trial medians) excludes 1; noisy, violating or failed rows are not compared",
                )
            )
            counts = {v: sum(r["verdict"] == v for r in rows) for v in ("faster", "slower", "same within noise")}
            console.print(", ".join(f"{n} {v}" for v, n in counts.items()) + f", {len(rows) - sum(counts.values())} "
                          "not compared")  # fmt: skip
        return 0
    from solkit.report.devices import card_spread, spread_table

    labels = device_labels(runs)
    rows = compare_devices(runs, labels)
    spread = card_spread(runs)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "comparison.json").write_text(
            json.dumps({"devices": dict(zip(labels, names)), "rows": rows}, indent=1, default=str)
        )
    if args.json:
        print_json({"devices": dict(zip(labels, names)), "rows": rows, "card_spread": spread})
        return 0
    cols, body = compare_devices_rows(rows, labels)
    console.print(table(f"across devices: {', '.join(f'{lab} ({n})' for lab, n in zip(labels, names))}", cols, body,
                        caption="each device's time and its own SOL fraction (T_SOL on that device / its time); "
                        "times are never compared across devices; spread = highest - lowest SOL fraction; "
                        "* = the bound differs"))  # fmt: skip
    if spread:
        console.print(table("card-to-card spread of the same row (one product, several cards)", *spread_table(spread),
                            caption="ms spread = slowest / fastest - 1 for the same workload and backend"))  # fmt: skip
    return 0
