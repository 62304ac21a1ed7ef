"""Where the time of the HF Llama-3-8B-shape training step goes, and how far compile+patch can get over compile.

Reads committed H200 results only (no device needed) and splits the compiled step into what ``solkit.patch`` does not
replace (the GEMMs at the run's sustained cuBLAS rate, SDPA cuDNN attention, the optimizer step) and the rest (norms,
RoPE, gates, residual adds, the loss's elementwise work, casts, launch gaps). The floor of that rest for the patched
step is its minimum HBM traffic at the datasheet bandwidth, counted tensor by tensor below. Their sum is the fastest a
compile+patch step can be while its GEMMs, attention and optimizer run as fast as compile's.

    python3 lab/benchmarks/train_step_budget.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from solkit.hardware.specs import get_spec

ROOT = Path(__file__).resolve().parents[2]
TRAIN = "benchmarks/results/train/2026-12-02_h200_hf_llama8b_L8/train_hf_llama_llama3-8b.json"
ATTENTION = "benchmarks/results/attention/2026-12-02_h200_prefill.json"
CALIBRATION = "benchmarks/results/calibration/2026-11-30_h200_1348.json"


def gemm_flops(c: dict) -> float:
    """Forward + backward GEMM FLOPs of one step: 6 x tokens x GEMM weights (projections, MLP, LM head)."""
    h, kv = c["hidden"], c["kv_heads"] * c["head_dim"]
    per_layer = h * (h + 2 * kv + c["heads"] * c["head_dim"]) + 3 * h * c["intermediate"]
    return 6.0 * c["batch"] * c["seq"] * (c["layers"] * per_layer + c["vocab"] * h)


def patched_elementwise_bytes(c: dict, loss_chunk: int = 4096, itemsize: int = 2) -> dict[str, float]:
    """Minimum HBM bytes of the patched step's non-GEMM, non-attention work (each tensor read or written once per
    pass that needs it): X = [tokens, hidden], K = [tokens, kv dim], I = [tokens, intermediate]."""
    t = c["batch"] * c["seq"]
    x, k, i = t * c["hidden"] * itemsize, t * c["kv_heads"] * c["head_dim"] * itemsize, t * c["intermediate"] * itemsize
    layer = {
        "rmsnorm x2 (fwd: read x, write y; bwd: read dy, x, write dx)": 2 * (2 * x + 3 * x),
        "rope q, k (fwd and bwd: read, write)": 4 * (x + k),
        "gate (fwd: read g, u, write h; bwd: read dh, g, u, write dg, du, h)": 3 * i + 6 * i,
        "residual x2 (fwd: read in the GEMM epilogue; bwd: the two gradients summed, read 2 write 1)": 2 * (x + 3 * x),
    }
    vocab_chunk = loss_chunk * c["vocab"] * itemsize
    chunks = t // loss_chunk
    loss = {
        "loss logits per chunk (GEMM write, CE read and write, read by the dh and dW GEMMs)": chunks * 5 * vocab_chunk,
        "loss dW accumulated over chunks (read and write)": (chunks - 1) * 2 * c["vocab"] * c["hidden"] * itemsize,
        "embedding (fwd gather write; bwd: dW zeroed and scattered)": 2 * x + 2 * c["vocab"] * c["hidden"] * itemsize,
    }
    out = {f"per layer x {c['layers']}: {k}": v * c["layers"] for k, v in layer.items()}
    out.update(loss)
    return out


def optimizer_floor_bytes(params: int, itemsize: int = 2) -> dict[str, float]:
    """Minimum HBM bytes of clip_grad_norm_ + AdamW over bf16 parameters whose moments are bf16 too (torch keeps
    AdamW's state in the parameter's dtype): the norm reads every gradient once; a fused update with the clip's
    scale folded in reads p, g, m, v and writes p, m, v once."""
    return {
        "clip_grad_norm_ (read g)": params * itemsize,
        "AdamW (read p, g, m, v; write p, m, v)": params * 7 * itemsize,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    a = ap.parse_args()
    run = json.loads((ROOT / TRAIN).read_text())
    att = json.loads((ROOT / ATTENTION).read_text())
    c = run["variants"]["compile"]["config"]
    calibrated = run["peaks"]["calibrated"]
    v = {n: run["variants"][n] for n in ("compile", "compile+patch", "patch")}
    step = {n: x["step_time_s"]["median"] * 1e3 for n, x in v.items()}
    optimizer = {n: (x["step_time_s"]["median"] - x["fwd_bwd_time_s"]["median"]) * 1e3 for n, x in v.items()}
    cudnn = next(r for r in att["rows"] if r["shape"] == "llama3-8b" and r["impl"] == "sdpa_cudnn")
    # causal attention FLOPs go as batch x seq^2: the measured 1 x 8192 call does the work of 4 x 4096
    assert cudnn["seq"] ** 2 == c["batch"] * c["seq"] ** 2 and cudnn["heads_q"] == c["heads"]
    gemm_ms = gemm_flops(c) / calibrated * 1e3
    attention_ms = cudnn["fwd_bwd"]["ms"] * c["layers"]
    bandwidth = get_spec("h200-sxm").memory_bandwidth_gbs.value * 1e9
    elementwise = patched_elementwise_bytes(c)
    floor_ms = sum(elementwise.values()) / bandwidth * 1e3
    shared = gemm_ms + attention_ms + optimizer["compile"]
    best = shared + floor_ms
    params = run["variants"]["compile"]["params"]
    opt_bytes = optimizer_floor_bytes(params)
    opt_floor_ms = sum(opt_bytes.values()) / bandwidth * 1e3
    # Every part but the GEMMs at its floor, attention as fast as cuDNN: the most any swap set could give without a
    # GEMM faster than cuBLAS or attention faster than cuDNN.
    best_all = gemm_ms + attention_ms + opt_floor_ms + floor_ms
    # The same on the calibrated basis: the card's measured copy bandwidth instead of the datasheet's.
    copy = json.loads((ROOT / CALIBRATION).read_text())["bandwidth"]["copy"]["value"]
    best_all_calibrated = gemm_ms + attention_ms + (opt_floor_ms + floor_ms) * bandwidth / copy
    result = {
        "sources": {
            "train": TRAIN,
            "attention": ATTENTION,
            "bandwidth": "solkit.hardware h200-sxm (datasheet)",
            "calibrated_bandwidth": CALIBRATION,
        },
        "config": c,
        "step_ms": step,
        "gemm": {"tflop": gemm_flops(c) / 1e12, "calibrated_tflops": calibrated / 1e12, "ms": gemm_ms},
        "attention_cudnn_fwd_bwd_ms": {"per_layer": cudnn["fwd_bwd"]["ms"], "step": attention_ms},
        "optimizer_ms (step - fwd_bwd)": optimizer,
        "compile_rest_ms": step["compile"] - shared,
        "compile+patch_rest_ms": step["compile+patch"] - gemm_ms - attention_ms - optimizer["compile+patch"],
        "patched_elementwise_bytes": elementwise,
        "patched_elementwise_floor_ms": floor_ms,
        "best_compile+patch_ms": best,
        "best_ratio_over_compile": step["compile"] / best,
        "params": params,
        "optimizer_floor_bytes": opt_bytes,
        "optimizer_floor_ms": opt_floor_ms,
        "best_with_optimizer_at_floor_ms": best_all,
        "best_with_optimizer_at_floor_ratio": step["compile"] / best_all,
        "calibrated_copy_bandwidth_tbs": copy / 1e12,
        "best_with_optimizer_at_floor_calibrated_ms": best_all_calibrated,
        "best_with_optimizer_at_floor_calibrated_ratio": step["compile"] / best_all_calibrated,
        "goal_ratio": 1.05,
        "step_ms_for_goal": step["compile"] / 1.05,
        "shares_of_compile_step": {
            "gemm": gemm_ms / step["compile"],
            "attention": attention_ms / step["compile"],
            "optimizer": optimizer["compile"] / step["compile"],
            "rest": (step["compile"] - shared) / step["compile"],
        },  # fmt: skip
    }
    text = json.dumps(result, indent=1)
    if a.out:
        Path(a.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
