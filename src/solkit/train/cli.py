"""``solkit train-bench``: a Llama-style training step per variant, with MFU, memory and loss parity."""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path

from solkit.errors import SolkitError
from solkit.output import CommandParser, console, print_json, table


def register(subparsers: argparse._SubParsersAction) -> None:
    from solkit.train.config import config_names
    from solkit.train.hf import FAMILIES as HF_FAMILIES
    from solkit.train.hf import HF_VARIANTS
    from solkit.train.variants import VARIANTS

    p = subparsers.add_parser(
        "train-bench",
        help="measure a Llama-style training step (tokens/s, MFU, memory, loss parity) per variant",
        description="Each variant runs in a fresh process. A step is zero_grad + forward + loss + backward + "
        "clip_grad_norm_ + AdamW.step, timed with CUDA events; tokens/s is the median over timed steps.",
    )
    p.add_argument("--config", default="tiny", help=f"model config: {', '.join(config_names())}")
    p.add_argument("--hf", choices=HF_FAMILIES, help="a Hugging Face transformers model of this family instead "
                   "(solkit.zoo, random weights, no download); variants: " + ", ".join(HF_VARIANTS))  # fmt: skip
    p.add_argument("--preset", default="tiny", help="with --hf: the zoo preset (default tiny; e.g. llama3-8b)")
    p.add_argument("--layers", type=int, help="with --hf: number of decoder layers (default: the preset's)")
    p.add_argument("--variants", nargs="+", help=f"variants to run, in order: {', '.join(VARIANTS)} (default "
                   "eager compile solkit compile+solkit; with --hf all six)")  # fmt: skip
    p.add_argument("--steps", type=int, default=8, help="timed steps (default 8)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps, not timed (default 3)")
    p.add_argument("--batch", type=int, help="per-rank batch (default: the config's)")
    p.add_argument("--seq", type=int, help="sequence length (default: the config's)")
    p.add_argument(
        "--dtype", choices=["bf16", "fp16", "fp32"], help="parameter dtype (default bf16 on GPU, fp32 on CPU)"
    )
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--nproc", type=int, default=1, help="processes (GPUs) under torchrun (default 1)")
    p.add_argument("--parallel", choices=["ddp", "fsdp2"], default="ddp", help="data parallelism when --nproc > 1")
    p.add_argument("--checkpoint", action="store_true", help="activation checkpointing of every layer (HFU reported)")
    p.add_argument("--max-batch", action="store_true", help="also search the largest batch that fits, per variant")
    p.add_argument("--peak-tflops", type=float, help="override the datasheet dense bf16 peak (TFLOP/s)")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend (default inductor)")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per variant process (default 900)")
    p.add_argument("--budget", type=float, help="total seconds; variants not started in time are marked skipped")
    p.add_argument("--out", default="solkit-results/train", help="folder for JSON, Markdown and HTML")
    p.add_argument("--json", action="store_true", help="print the JSON summary instead of a table")
    p.set_defaults(func=_cmd)


def _command_line() -> str:
    return "solkit train-bench " + shlex.join(a for a in sys.argv[1:] if a != "train-bench")


def _cmd(args: argparse.Namespace) -> int:
    import torch

    from solkit.train import report
    from solkit.train.hf import HF_VARIANTS
    from solkit.train.runner import run_bench

    for name in ("steps", "nproc"):
        if getattr(args, name) < 1:
            raise SolkitError(f"--{name} must be >= 1")
    if args.warmup < 1:
        raise SolkitError("--warmup must be >= 1 (the first step compiles and autotunes)")
    for name in ("batch", "seq"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise SolkitError(f"--{name} must be >= 1")
    for name in ("budget", "timeout", "lr", "peak_tflops"):  # a finite positive number, or (budget) none at all
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise SolkitError(f"--{name.replace('_', '-')} must be a finite number > 0, got {value}")
    on_gpu = args.device != "cpu" and torch.cuda.is_available()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SolkitError("--device cuda: no CUDA GPU is visible")
    if args.nproc > 1 and on_gpu and args.nproc > torch.cuda.device_count():
        raise SolkitError(f"--nproc {args.nproc}: only {torch.cuda.device_count()} GPU(s) visible")
    dtype = args.dtype or ("bf16" if on_gpu else "fp32")
    out = Path(args.out)
    stem = f"train_{args.config}"
    hf = None
    if args.hf:
        if args.layers is not None and args.layers < 1:
            raise SolkitError("--layers must be >= 1")
        hf = {"family": args.hf, "preset": args.preset, "layers": args.layers}
        stem = f"train_hf_{args.hf}_{args.preset}"
    elif args.layers is not None or args.preset != "tiny":
        raise SolkitError("--preset and --layers go with --hf (the built-in configs are --config)")
    variants = args.variants or (list(HF_VARIANTS) if hf else ["eager", "compile", "solkit", "compile+solkit"])
    log = (lambda s: None) if args.json else (lambda s: console.print(s, highlight=False))
    summary = run_bench(
        args.config, variants, steps=args.steps, warmup=args.warmup, batch=args.batch, seq=args.seq,
        dtype=dtype, device="cuda" if on_gpu else "cpu", nproc=args.nproc, parallel=args.parallel,
        checkpoint=args.checkpoint, seed=args.seed, lr=args.lr, timeout_s=args.timeout,
        peak_tflops=args.peak_tflops, max_batch=args.max_batch, compile_backend=args.compile_backend,
        budget_s=args.budget, out_json=out / f"{stem}.json", command=_command_line(), hf=hf, log=log,
    )  # fmt: skip
    (out / f"{stem}.md").write_text(report.markdown(summary))
    (out / f"{stem}.html").write_text(report.html_section(summary))
    if args.json:
        print_json(summary)
    else:
        title = f"train-bench --hf {args.hf} {args.preset}" if hf else f"train-bench {args.config}"
        console.print(table(title, report.CONSOLE_COLUMNS, report.console_rows(summary)))
        for name, r in summary["variants"].items():
            missing = (r.get("variant") or {}).get("unavailable_swaps")
            if missing:
                console.print(f"{name}: unavailable swaps: {', '.join(missing)}", highlight=False)
        for line in report.markdown(summary).split("Goals:")[1].strip().splitlines():
            console.print(line, highlight=False)
        console.print(f"wrote {out / stem}.json, .md, .html", highlight=False)
    statuses = [r.get("status") for r in summary["variants"].values()]
    return 0 if all(s == "ok" for s in statuses) else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m solkit.train.cli ...``: train-bench alone, without importing the other commands."""
    parser = CommandParser(prog="solkit")
    register(parser.add_subparsers(dest="command", parser_class=CommandParser))
    args = parser.parse_args(["train-bench", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args) or 0)
    except SolkitError as exc:
        sys.stderr.write(f"solkit: error: {exc}\n")
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
