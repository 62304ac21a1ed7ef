"""Run training variants, each in a fresh process, and turn their timings into MFU, parity and goals.

Each variant runs in its own subprocess (``python -m solkit.train.worker``, or ``torchrun`` for
``nproc > 1``) because kernel patches and torch.compile caches are process-global; a crash, an OOM
or a timeout in one variant is recorded and the others still run. Results are written after every
variant, so a run killed part-way keeps what it measured.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError, choices_hint
from solkit.train.config import ModelConfig, fallback_peaks, get_config
from solkit.train.flops import CONVENTIONS, param_counts, utilisation
from solkit.train.variants import get_variant

# Parity against eager (same seed, same weights, same tokens), in three parts:
# * forward: the step-0 loss, |Δ| ≤ atol + rtol·|loss| (before any update: rounding only);
# * backward: the step-0 gradient norm of every parameter, relative difference ≤ grad_param (norms
#   below 1e-3 of the largest are compared against that floor), and the total norm ≤ grad_total;
# * training: the loss at every step, |Δ| ≤ atol + rtol·|loss|. The synthetic batches repeat every 4
#   steps, so the loss falls fast (12.6 → 0.4 in 11 steps on llama3-8b-L8) and bf16 rounding
#   differences grow with it: on the H200, torch.compile and Liger, both correct, ended up
#   to 0.027 from eager. The trajectory tolerance allows twice that; a wrong gradient (checked
#   directly by the backward part) or a broken optimizer interplay moves the curve by far more.
PARITY_TOL: dict[str, dict[str, Any]] = {
    "bf16": {"first_loss": (0.01, 0.002), "trajectory": (0.05, 0.01), "grad_total": 0.02, "grad_param": 0.05},
    "fp16": {"first_loss": (0.01, 0.002), "trajectory": (0.05, 0.01), "grad_total": 0.02, "grad_param": 0.05},
    "fp32": {"first_loss": (1e-4, 1e-5), "trajectory": (1e-3, 1e-3), "grad_total": 1e-3, "grad_param": 1e-3},
}

GOALS = {
    "solkit_vs_eager": 1.15,
    "solkit_vs_compile": 1.0,
    "compile+solkit_vs_compile": 1.03,
    "flce_memory_cut": 0.30,
}


def _worker_cmd(nproc: int) -> list[str]:
    if nproc <= 1:
        return [sys.executable, "-m", "solkit.train.worker"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", "solkit.train.worker"]  # fmt: skip


def run_worker(spec: dict[str, Any], timeout_s: float, nproc: int = 1, log: Callable[[str], None] | None = None):
    """Run one variant in a fresh process; always returns a result dict (status ok/failed/oom/timeout)."""
    with tempfile.TemporaryDirectory(prefix="solkit-train-") as tmp:
        spec = {**spec, "result_path": str(Path(tmp) / "result.json")}
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(spec))
        env = dict(os.environ)
        if spec.get("device") == "cpu":
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [*_worker_cmd(nproc), str(spec_path)], capture_output=True, text=True, timeout=timeout_s, env=env
            )
        except subprocess.TimeoutExpired as exc:
            tail = (exc.stderr or b"")[-1500:]
            tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
            return {"status": "timeout", "error": f"no result within {timeout_s:.0f} s", "stderr_tail": tail}
        wall = time.perf_counter() - t0
        result_file = Path(spec["result_path"])
        if result_file.exists():
            result = json.loads(result_file.read_text())
        else:
            result = {"status": "failed", "error": f"worker exited {proc.returncode} without a result"}
        result["wall_s"] = wall
        if result.get("status") != "ok":
            result["stderr_tail"] = proc.stderr[-3000:]
        return result


def resolve_peaks(
    device_name: str | None, peak_tflops: float | None, ceiling_flops: float | None, arch_id: str | None = None
) -> dict[str, Any]:
    """Datasheet bf16 dense peak and the calibrated GEMM ceiling, each with where it came from."""
    out: dict[str, Any] = {"datasheet": None, "calibrated": None, "sources": {}}
    if peak_tflops:
        out["datasheet"] = peak_tflops * 1e12
        out["sources"]["datasheet"] = "--peak-tflops"
    elif device_name:
        with contextlib.suppress(Exception):
            from solkit.hardware.specs import get_spec, match_spec

            spec = get_spec(arch_id) if arch_id else match_spec(device_name)
            if spec is not None:
                out["datasheet"] = spec.peak_flops("bf16_tensor")
                out["sources"]["datasheet"] = f"solkit.hardware {spec.id} bf16_tensor (dense)"
        if out["datasheet"] is None:
            for key, value in fallback_peaks().items():
                if key in device_name:
                    out["datasheet"] = value
                    out["sources"]["datasheet"] = f"train/configs.yaml fallback_bf16_peaks[{key!r}]"
                    break
    if ceiling_flops:
        out["calibrated"] = ceiling_flops
        out["sources"]["calibrated"] = (
            "sustained bf16 8192³ cuBLAS matmul (median of 150 after 150 back-to-back), measured by this run's "
            "first variant right after its timed steps"
        )
    return out


def _param_grad_diff(ref: dict[str, float], got: dict[str, float]) -> tuple[float | None, str | None]:
    """Worst relative difference of per-parameter gradient norms, and the parameter it is on."""
    if not ref or not got:
        return None, None
    if set(ref) != set(got):
        return float("inf"), "parameter names differ: " + ", ".join(sorted(set(ref) ^ set(got)))[:200]
    floor = 1e-3 * max(ref.values())
    worst, where = 0.0, None
    for name, want in ref.items():
        rel = abs(got[name] - want) / max(want, floor)
        if not rel <= worst:  # NaN counts as worst
            worst, where = rel, name
    return worst, where


def _parity(results: dict[str, dict[str, Any]], dtype: str) -> None:
    base = results.get("eager")
    if not base or base.get("status") != "ok":
        return
    tol = PARITY_TOL.get(dtype, PARITY_TOL["bf16"])
    ref = base["losses"]
    for r in results.values():
        if r.get("status") != "ok":
            continue
        got = r["losses"]
        n = min(len(ref), len(got))
        diffs = [abs(a - b) for a, b in zip(got[:n], ref[:n])]
        t_atol, t_rtol = tol["trajectory"]
        bad = [i for i in range(n) if not diffs[i] <= t_atol + t_rtol * abs(ref[i])]
        f_atol, f_rtol = tol["first_loss"]
        first_ok = bool(diffs) and diffs[0] <= f_atol + f_rtol * abs(ref[0])
        g_ref, g_got = (base.get("grad_norms") or [None])[0], (r.get("grad_norms") or [None])[0]
        g_rel = abs(g_got - g_ref) / max(abs(g_ref), 1e-30) if g_ref is not None and g_got is not None else None
        p_rel, p_where = _param_grad_diff(
            base.get("param_grad_norms_step0") or {}, r.get("param_grad_norms_step0") or {}
        )
        checks = {
            "forward_step0": first_ok,
            "grad_norm_total_step0": g_rel is None or g_rel <= tol["grad_total"],
            "grad_norm_per_param_step0": p_rel is None or p_rel <= tol["grad_param"],
            "trajectory": not bad and n == len(ref),
        }
        r["parity"] = {
            "reference": "eager, same seed, weights and tokens",
            "tolerances": tol,
            "max_abs_diff": max(diffs) if diffs else None,
            "final_abs_diff": diffs[-1] if diffs else None,
            "eager_loss_drop": ref[0] - ref[-1],
            "steps_compared": n,
            "failed_steps": bad,
            "first_grad_norm_rel_diff": g_rel,
            "worst_param_grad_rel_diff": p_rel,
            "worst_param": p_where,
            "checks": checks,
            "ok": all(checks.values()),
        }


def _native_parts(ok: dict[str, dict[str, Any]]) -> tuple[dict[str, float], dict[str, float], dict[str, Any]]:
    """Speed-ups, peak-memory cuts and goals of the built-in model's variants."""

    def tps(name: str) -> float | None:
        return ok[name]["tokens_per_s_per_rank"] if name in ok else None

    def mem(name: str) -> float | None:
        return ok[name].get("memory", {}).get("max_allocated_bytes") if name in ok else None

    speedups = {}
    for a, b in (("solkit", "eager"), ("solkit", "compile"), ("compile+solkit", "compile"), ("compile", "eager"),
                 ("liger", "eager"), ("compile+solkit", "eager"), ("flce", "eager")):  # fmt: skip
        if tps(a) and tps(b):
            speedups[f"{a}_vs_{b}"] = tps(a) / tps(b)
    memory = {}
    for a in ("flce", "solkit", "liger", "compile+solkit"):
        if mem(a) and mem("eager"):
            memory[f"{a}_vs_eager_cut"] = 1 - mem(a) / mem("eager")
    if mem("compile+solkit") and mem("compile"):
        memory["compile+solkit_vs_compile_cut"] = 1 - mem("compile+solkit") / mem("compile")

    goals = {}
    for key, target in GOALS.items():
        value = memory.get("flce_vs_eager_cut") if key == "flce_memory_cut" else speedups.get(key)
        run_names = ["flce", "eager"] if key == "flce_memory_cut" else key.split("_vs_")
        complete = all(ok.get(n, {}).get("variant", {}).get("complete", False) for n in run_names if n in ok)
        goals[key] = {"target": target, "value": value, "met": None if value is None else value >= target,
                      "all_swaps_available": complete}  # fmt: skip
    return speedups, memory, goals


def summarise(results: dict[str, dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """Add MFU, speedups, memory ratios, parity and goal checks to the raw per-variant results."""
    if meta.get("model_config"):
        cfg = ModelConfig(**meta["model_config"])
    else:
        cfg = get_config(meta["config"], batch=meta.get("batch"), seq=meta.get("seq"))
    ok = {k: v for k, v in results.items() if v.get("status") == "ok"}
    ceilings = [v["gemm_ceiling_flops"] for v in ok.values() if v.get("gemm_ceiling_flops")]
    device_name = next((v["env"].get("gpu") for v in ok.values() if v.get("env", {}).get("gpu")), None)
    ceiling = meta.get("gemm_ceiling_flops") or (sorted(ceilings)[len(ceilings) // 2] if ceilings else None)
    arch_id = next((v["env"].get("arch_id") for v in ok.values() if v.get("env", {}).get("arch_id")), None)
    peaks = resolve_peaks(device_name, meta.get("peak_tflops"), ceiling, arch_id)
    bases = {k: v for k, v in peaks.items() if k in ("datasheet", "calibrated") and v}
    for r in ok.values():
        r["utilisation"] = utilisation(cfg, cfg.seq, r["tokens_per_s_per_rank"], bases, r["activation_checkpointing"])
    _parity(results, meta.get("dtype", "bf16"))

    if meta.get("hf"):
        from solkit.train.hf import summary_parts

        speedups, memory, goals = summary_parts(ok)
    else:
        speedups, memory, goals = _native_parts(ok)
    goals["loss_parity"] = {"met": all(r.get("parity", {}).get("ok", False) for r in ok.values()) if ok else None}
    goals["tokens_per_step"] = cfg.batch * cfg.seq

    return {
        "schema": "solkit.train-bench/1",
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": meta.get("command"),
        "config": cfg.model_dump(),
        "hf": meta.get("hf"),
        "params": param_counts(cfg),
        "flop_conventions": CONVENTIONS,
        "peaks": peaks,
        "settings": {
            k: meta.get(k)
            for k in (
                "steps",
                "warmup",
                "dtype",
                "seed",
                "lr",
                "nproc",
                "parallel",
                "checkpoint",
                "device",
                "compile_backend",
            )
        },  # fmt: skip
        "timing_note": "tokens/s = batch·seq per rank ÷ median step time; a step is zero_grad + forward + loss + "
        "backward + clip_grad_norm_ + AdamW(fused on CUDA).step, timed with CUDA events per step after warm-up",
        "variants": results,
        "speedups_iso_batch": speedups,
        "peak_memory_cuts": memory,
        "goals": goals,
        "max_batch": meta.get("max_batch"),
        "scaling": meta.get("scaling"),
    }


def max_batch_search(probe: Callable[[int], str], start: int = 1, limit: int = 1024) -> tuple[int, dict[int, str]]:
    """Largest batch for which ``probe(batch)`` returns "ok": doubling, then bisection. Returns (best, log)."""
    log: dict[int, str] = {}
    lo, hi = 0, None
    b = max(1, start)
    while b <= limit:
        log[b] = probe(b)
        if log[b] != "ok":
            hi = b
            break
        lo, b = b, b * 2
    if hi is None:
        return lo, log
    while hi - lo > 1:
        mid = (lo + hi) // 2
        log[mid] = probe(mid)
        lo, hi = (mid, hi) if log[mid] == "ok" else (lo, mid)
    return lo, log


def run_bench(
    config: str,
    variants: list[str],
    *,
    steps: int = 8,
    warmup: int = 3,
    batch: int | None = None,
    seq: int | None = None,
    dtype: str = "bf16",
    device: str = "auto",
    nproc: int = 1,
    parallel: str = "ddp",
    checkpoint: bool = False,
    seed: int = 0,
    lr: float = 3e-4,
    timeout_s: float = 900.0,
    peak_tflops: float | None = None,
    max_batch: bool = False,
    compile_backend: str = "inductor",
    budget_s: float | None = None,
    out_json: Path | None = None,
    command: str | None = None,
    hf: dict[str, Any] | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """Run every variant (in order) and return the summary; rewrites ``out_json`` after each one."""
    # Long on purpose: one run of the variants in order, with their parity checks against eager.
    if hf:  # a Hugging Face model from solkit.zoo (train/hf.py), one GPU
        from solkit.train.hf import HF_VARIANTS, model_config

        for v in variants:
            if v not in HF_VARIANTS:
                raise SolkitError(choices_hint(v, list(HF_VARIANTS), "--hf variant"))
        if nproc > 1:
            raise SolkitError("--hf runs each variant on one GPU: --nproc must be 1")
        cfg = model_config(hf["family"], hf.get("preset", "tiny"), hf.get("layers"), seq or 128, batch or 1)
    else:
        cfg = get_config(config, batch=batch, seq=seq)
        for v in variants:
            get_variant(v)
    if nproc > 1 and shutil.which("torchrun") is None and not _has_torch_run():
        raise SolkitError("--nproc > 1 needs torch.distributed.run (torchrun)")
    meta = dict(config=config, batch=cfg.batch, seq=cfg.seq, steps=steps, warmup=warmup, dtype=dtype, seed=seed,
                lr=lr, nproc=nproc, parallel=parallel if nproc > 1 else None, checkpoint=checkpoint, device=device,
                peak_tflops=peak_tflops, command=command, compile_backend=compile_backend, hf=hf,
                model_config=cfg.model_dump() if hf else None)  # fmt: skip
    base_spec = dict(config=config, batch=cfg.batch, seq=cfg.seq, steps=steps, warmup=warmup, dtype=dtype, seed=seed,
                     lr=lr, device=device, checkpoint=checkpoint, parallel=parallel,
                     compile_backend=compile_backend, hf=hf)  # fmt: skip
    results: dict[str, dict[str, Any]] = {}
    summary: dict[str, Any] = {}

    def save() -> None:
        nonlocal summary
        summary = summarise(results, meta)
        if out_json is not None:
            out_json.parent.mkdir(parents=True, exist_ok=True)
            out_json.write_text(json.dumps(summary, indent=1, default=str))

    deadline = time.monotonic() + budget_s if budget_s else None

    def time_left() -> float:
        return timeout_s if deadline is None else min(timeout_s, deadline - time.monotonic())

    for n, v in enumerate(variants):
        if time_left() < 5:
            results[v] = {"status": "skipped", "error": f"--budget {budget_s:.0f} s exhausted before this variant"}
            save()
            continue
        log(f"train-bench: {config} {v} (batch {cfg.batch} × seq {cfg.seq}, nproc {nproc}) ...")
        # The calibrated GEMM ceiling is measured once, by the first variant, right after its timed steps.
        r = run_worker({**base_spec, "variant": v, "gemm_ceiling": n == 0}, time_left(), nproc=nproc)
        results[v] = r
        log(f"train-bench: {v}: {r.get('status')}" + (f" {r['tokens_per_s_per_rank']:.0f} tok/s" if
            r.get("status") == "ok" else f" ({r.get('error', '')[:200]})"))  # fmt: skip
        save()

    if nproc > 1:  # scaling efficiency against one GPU at the same local batch
        scaling = {}
        for v in variants:
            if results[v].get("status") != "ok":
                continue
            log(f"train-bench: {v} on 1 process for scaling efficiency ...")
            if time_left() < 5:
                break
            single = run_worker({**base_spec, "variant": v}, time_left(), nproc=1)
            if single.get("status") == "ok":
                scaling[v] = {
                    "tokens_per_s_1proc": single["tokens_per_s_per_rank"],
                    "tokens_per_s_per_rank": results[v]["tokens_per_s_per_rank"],
                    "efficiency": results[v]["tokens_per_s_per_rank"] / single["tokens_per_s_per_rank"],
                }
        meta["scaling"] = scaling
        save()

    if max_batch:
        found = {}
        for v in variants:
            log(f"train-bench: max-batch search for {v} ...")

            def probe(b: int, v: str = v) -> str:
                spec = {**base_spec, "variant": v, "batch": b, "steps": 2, "warmup": 1, "gemm_ceiling": False}
                if time_left() < 5:
                    return "skipped"
                r = run_worker(spec, time_left(), nproc=nproc)
                found.setdefault(v, {"probes": {}})["probes"][b] = {
                    "status": r.get("status"), "tokens_per_s_per_rank": r.get("tokens_per_s_per_rank")}  # fmt: skip
                return r.get("status", "failed")

            best, _ = max_batch_search(probe, start=cfg.batch)
            found[v]["max_batch"] = best
            found[v]["tokens_per_s_at_max"] = found[v]["probes"].get(best, {}).get("tokens_per_s_per_rank")
        meta["max_batch"] = found
        save()
    if not summary:
        save()
    return summary


def _has_torch_run() -> bool:
    try:
        import torch.distributed.run  # noqa: F401

        return True
    except ImportError:
        return False
