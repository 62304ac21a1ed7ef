"""``solkit model``: the SOL of every operator of a model's step (a Hugging Face config, or module:function)."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError
from solkit.model.ranking import STEPS, TOP_K
from solkit.output import console, err_console, fmt, print_json, table

HELP = "the SOL of every operator of a model's training step (Hugging Face config or module:function), measured"
COMPARE_HELP = "is the top-k by time lost of two `solkit model` runs the same, up to ties measured within each run?"
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "model",
        help=HELP,
        description="Measure one step of a model with torch.profiler, attribute every kernel to the aten op or "
        "Inductor region that launched it, and score each against T_SOL from the meta-tensor analysis: time, "
        "T_SOL, SOL fraction, tier and advice, and the time lost to SOL, per operator, module type and layer.",
    )
    src = p.add_argument_group("the model (one of)")
    src.add_argument("--hf", metavar="FAMILY", help="a transformers family built from a config with random weights: "
                     "llama, mistral, qwen2, qwen3, gemma2, gemma3, vit, resnet")  # fmt: skip
    src.add_argument("--config", metavar="CONFIG_JSON", help="a config.json (its model_type names the family); "
                     "with --hf, fields laid over the preset")  # fmt: skip
    src.add_argument("--entry", metavar="MODULE:FUNCTION", help="a function returning (model, inputs)")
    p.add_argument("--preset", default="tiny", help="shapes of --hf (tiny, llama3-8b, qwen3-8b, vit-b-16, 50, ...)")
    p.add_argument("--layers", type=int, help="number of hidden layers (overrides the preset)")
    p.add_argument("--seq", type=int, default=128, help="sequence length of a language model (default 128)")
    p.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    p.add_argument("--dtype", choices=list(DTYPES), help="parameter dtype (default bf16 on a GPU, fp32 on a CPU)")
    p.add_argument("--mode", choices=["fwd", "fwd_bwd", "train_step"], default="train_step",
                   help="fwd (no_grad), fwd_bwd, or train_step (plus AdamW); default train_step")  # fmt: skip
    p.add_argument("--optimizer", choices=["default", "foreach", "fused", "for-loop"], default="default",
                   help="the AdamW of train_step: default (as PyTorch makes it: foreach on CUDA), or one "
                   "implementation")  # fmt: skip
    p.add_argument("--compile", action="store_true", help="run the step through torch.compile")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--devices", metavar="all|0,1,3|cpu,cpu|cpu:N",
                   help="the step on each of these devices at once, one worker process each: the first device's "
                   "report, every run's step and the card-to-card spread (docs/scale.md)")  # fmt: skip
    p.add_argument("--ray", metavar="auto|local|ADDRESS",
                   help="the step on every GPU of a Ray cluster at once, one actor each (with --devices cpu:N, N CPU "
                   "actors): the same report as --devices (needs solkit[ray]; docs/scale.md)")  # fmt: skip
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps before the profiled ones (default 2)")
    p.add_argument("--steps", type=int, default=STEPS,
                   help=f"profiled steps (default {STEPS}): operators are ranked by their median time lost over "
                   "them, with its min-max range; overlapping ranges are ties (2=)")  # fmt: skip
    p.add_argument("--arch", help="score on this product's datasheet instead of the present device's")
    p.add_argument("--basis", choices=["spec", "calibrated"], default="spec", help="ceilings of T_SOL")
    p.add_argument("--precision", default="fastest", help="fastest (default) or as-written: how matrix work is charged")
    p.add_argument("--what-if", dest="what_if", metavar="ARCH[,ARCH]",
                   help="also each operator's T_SOL, bound and tier on these products (solkit hw list), and the "
                   "step's sum of T_SOL on each (analysis)")  # fmt: skip
    p.add_argument("--top", type=int, default=15, help="operators listed, by time lost (default 15)")
    p.add_argument("--html", metavar="PATH", help="write report.html, results.json and figures to this folder")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_cmd)
    c = subparsers.add_parser(
        "model-compare",
        help=COMPARE_HELP,
        description="Compare the operators ranked by median time lost (over each run's profiled steps) of two "
        "`solkit model` runs of the same step. The top-k lists are stable when they are equal up to ties: an operator "
        "in one and not the other must be tied at the cut in both runs (its min-max range over the steps overlaps "
        "one across the cut), and a pair the runs order differently must be tied in both runs.",
    )
    c.add_argument("results", nargs=2, metavar="RESULTS", help="results.json of `solkit model --html DIR` (or DIR)")
    c.add_argument("--top", type=int, default=TOP_K, help=f"length of the lists compared (default {TOP_K})")
    c.add_argument("--json", action="store_true", help="print the comparison as JSON")
    c.set_defaults(func=_compare_cmd)


def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise SolkitError("--device cuda: no CUDA device is available")
    return torch.device(name)


def _to(x: Any, device, dtype) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    def move(t):
        if not isinstance(t, torch.Tensor):
            return t
        return t.to(device, dtype) if dtype is not None and t.is_floating_point() else t.to(device)

    return tree_map(move, x)


def _load(args: argparse.Namespace, device):
    import torch

    from solkit.zoo import build, family_of_config, load_entry

    given = [n for n in ("hf", "entry") if getattr(args, n)] + (["config"] if args.config and not args.hf else [])
    if len(given) != 1:
        raise SolkitError("give exactly one of --hf FAMILY, --config CONFIG_JSON, --entry MODULE:FUNCTION")
    dtype = getattr(torch, DTYPES[args.dtype]) if args.dtype else None
    if args.entry:
        b = load_entry(args.entry)
        b.model.to(device=device, dtype=dtype) if dtype is not None else b.model.to(device)
        b.args, b.kwargs, b.labels = _to((b.args, b.kwargs, b.labels), device, dtype)
        return b
    default = torch.bfloat16 if device.type == "cuda" else torch.float32
    family = args.hf or family_of_config(args.config)
    return build(family, layers=args.layers, seq=args.seq, batch=args.batch, dtype=dtype or default,
                 device=device, preset=args.preset, config=args.config)  # fmt: skip


def _check(args: argparse.Namespace) -> None:
    from solkit.sol.precision import parse_precision

    for name in ("seq", "batch", "top", "steps"):
        if getattr(args, name) < 1:
            raise SolkitError(f"--{name} {getattr(args, name)}: must be at least 1")
    if args.warmup < 0:
        raise SolkitError(f"--warmup {args.warmup}: must be 0 or more")
    if args.devices is not None or args.ray:
        from solkit.scale import parse_devices

        if args.device != "auto":
            raise SolkitError("--device and --devices/--ray: give one (--devices names every device to use)")
        if args.devices is not None and not args.ray:  # with --ray the pool checks it (all or cpu:N)
            parse_devices(args.devices)  # a bad list is one line before any worker starts
    if args.html and Path(args.html).is_file():
        raise SolkitError(f"--html {args.html}: is a file; give a folder")
    args.precision = parse_precision(args.precision)
    if args.what_if is not None:
        from solkit.report.crossarch import product_ids

        args.what_if = product_ids(args.what_if)


def _analyse(args: argparse.Namespace, device, progress=None):
    from solkit.model.analyze import analyze

    built = _load(args, device)
    return analyze(built.model, built, mode=args.mode, compile=args.compile, warmup=args.warmup, steps=args.steps,
                   arch=args.arch,
                   basis=args.basis, precision=args.precision, what_if=args.what_if, optimizer=args.optimizer,
                   progress=progress)  # fmt: skip


def _analyse_on_worker(args: argparse.Namespace):
    """One run of ``--devices`` / ``--ray``, in its worker process, on the device the worker is pinned to."""
    import torch

    from solkit.scale import worker_state

    return _analyse(args, torch.device(worker_state().device))


def _cmd(args: argparse.Namespace) -> int:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from solkit.model.devices import on_devices, serial_report
    from solkit.scale import Call

    _check(args)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=True, disable=args.json) as bar:
        if args.devices is not None or args.ray:
            where = f"--ray {args.ray}" if args.ray else f"--devices {args.devices}"
            task = bar.add_task(f"the step on each worker of {where}")
            rep = on_devices(args.devices, Call(_analyse_on_worker, (args,)), args.top, ray=args.ray,
                             on_outcome=lambda o: bar.update(task, description=f"{o.worker} done"))  # fmt: skip
        else:
            task, t0 = bar.add_task("building the model"), time.perf_counter()
            device = _device(args.device)
            rep = _analyse(args, device, progress=lambda msg: bar.update(task, description=msg))
            rep = serial_report(rep, str(device), time.perf_counter() - t0, args.top)
    rep.meta["command"] = "solkit model " + shlex.join(a for a in sys.argv[1:] if a != "model")
    paths = {}
    if args.html:
        from solkit.model.html import write_model_report

        paths = write_model_report(rep, args.html)
    d = rep.to_dict(top=args.top)
    if args.json:
        print_json({**d, "files": {k: str(v) for k, v in paths.items()}})
        return 0
    _print(d, args.top)
    if paths:
        console.print(f"report: {paths['html']}")
    return 0


def _print(d: dict[str, Any], top: int) -> None:
    from solkit.model.html import summary_lines

    n = d["summary"].get("steps_profiled", 1)
    cols = ["rank", "operator", "module type", "calls", "ms", "T_SOL ms", "SOL", "lost ms (median)", "lost range",
            "bound", "tier", "solkit kernel"]  # fmt: skip
    rows = [[o["rank_label"], o["name"], o["category"], o["calls"], o["time_ms"], o["t_sol_ms"], o["sol_fraction"],
             o["lost_ms_median"], f"{fmt(o['lost_ms_min'])}-{fmt(o['lost_ms_max'])}", o["bound"], o["tier"],
             o["solkit_kernel"]] for o in d["ops"][:top]]  # fmt: skip
    note = (f"ranked by median time lost over {n} profiled steps; range: min-max over them; 2= marks ties "
            "(overlapping ranges); ms, T_SOL, SOL: the median step")  # fmt: skip
    console.print(table(f"Top {len(rows)} operators by time lost to SOL", cols, rows, caption=note))
    gcols = ["module type", "calls", "ms", "T_SOL ms", "SOL", "lost ms", "tier"]
    grows = [[g["name"], g["calls"], g["time_ms"], g["t_sol_ms"], g["sol_fraction"], g["lost_ms"], g["tier"]]
             for g in d["categories"]]  # fmt: skip
    console.print(table("Per module type", gcols, grows))
    if d.get("what_if"):
        _print_what_if(d, top)
    if len(d["meta"].get("runs", [])) > 1:
        _print_runs(d["meta"])
    for line in summary_lines(d):
        console.print(line, highlight=False)
    s = d["summary"]
    if s.get("measured_le_wall") is False:
        err_console.print(f"[yellow]warning:[/yellow] the attributed kernel time ({fmt(s['measured_ms'])} ms) exceeds "
                          f"the step's wall time ({fmt(s['wall_ms'])} ms): overlapping streams, or kernels counted "
                          "twice; do not read the per-op times as exact")  # fmt: skip
    if s["attributed_share"] < s["attributed_goal"]:
        err_console.print(f"[yellow]warning:[/yellow] only {fmt(s['attributed_share'] * 100)} % of the measured time "
                          "has a T_SOL (goal 95 %); see the rows with no T_SOL in --json")  # fmt: skip


def _print_runs(meta: dict[str, Any]) -> None:
    from solkit.report.devices import short

    cols = ["worker", "device", "name", "measured ms", "T_SOL ms", "step SOL", "attributed", "error"]
    rows = [[r["worker"], short(r["device_uuid"]), r["device_name"], r.get("measured_ms"), r.get("t_sol_ms"),
             r.get("step_sol"), r.get("attributed_share"), r.get("error")] for r in meta["runs"]]  # fmt: skip
    step = meta["card_spread"]["step"]
    note = (f"card-to-card spread of the step: {fmt(step[0]['ms_spread'] * 100)} % (slowest / fastest - 1)" if step
            else "one card: no card-to-card spread")  # fmt: skip
    console.print(table("The step on each device (the report above is the first one's)", cols, rows, caption=note))


def _print_what_if(d: dict[str, Any], top: int) -> None:
    from solkit.model.html import what_if_rows

    w = d["what_if"]
    cols, rows = what_if_rows(d, top)
    console.print(table(f"What-if on {', '.join(w['products'])} (analysis; measured on {w['measured_on']}; "
                        f"precision {w['precision']})", cols,
                        rows, caption=f"{w['note']}; {len(w['bound_changes'])} operators change bound"))  # fmt: skip


def _ranking_of(arg: str) -> list[dict[str, Any]]:
    import json

    p = Path(arg) / "results.json" if Path(arg).is_dir() else Path(arg)
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise SolkitError(f"{arg}: no readable results.json of `solkit model` ({type(exc).__name__})") from None
    ranking = (d.get("summary") or {}).get("ranking") if isinstance(d, dict) else None
    if not ranking:
        raise SolkitError(f"{p}: no `summary.ranking` (written before solkit model ranked over steps; run it again)")
    return ranking


def _compare_cmd(args: argparse.Namespace) -> int:
    from solkit.model.ranking import top_stability

    if args.top < 1:
        raise SolkitError(f"--top {args.top}: must be at least 1")
    a, b = (_ranking_of(x) for x in args.results)
    res = top_stability(a, b, args.top)
    if args.json:
        print_json({"a": args.results[0], "b": args.results[1], **res})
        return 0
    by = [{r["name"]: r for r in x} for x in (a, b)]
    rows = []
    for i in range(args.top):
        row: list[Any] = [i + 1]
        for top, ranked in ((res["top_a"], by[0]), (res["top_b"], by[1])):
            r = ranked.get(top[i]) if i < len(top) else None
            row += [r["name"], r["rank_label"], f"{fmt(r['lost_ms_median'])} ({fmt(r['lost_ms_min'])}-"
                    f"{fmt(r['lost_ms_max'])})"] if r else ["", "", ""]  # fmt: skip
        rows.append(row)
    cols = ["place", "A: operator", "rank", "lost ms (range)", "B: operator", "rank", "lost ms (range)"]
    console.print(table(f"Top {args.top} by median time lost: A {args.results[0]}, B {args.results[1]}", cols, rows))
    verdict = "STABLE" if res["stable"] else "NOT STABLE"
    console.print(f"{verdict}: same order {res['same_order']}, same set {res['same_set']}; swapped {res['swapped']} "
                  f"(not tied: {res['swapped_not_tied']}); reordered, not tied: {res['reordered_not_tied']}. "
                  f"Rule: {res['rule']}.", highlight=False)  # fmt: skip
    return 0
