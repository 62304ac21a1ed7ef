"""Turn counters into a diagnosis: which roof, how far from it, why, and what to try next.

Two levels:

* per kernel (:func:`diagnose_kernel`): ncu's Speed-of-Light figures classify it (the SOLBottleneck
  rule: both SM and memory throughput < 60 % of peak -> latency-bound; either >= 80 % -> at that
  roof; otherwise a gap of >= 10 points names the busier side; else balanced), then rules over
  occupancy, registers, spills, sector use, L2 hit rate, the tensor pipe and the wave count give
  concrete advice;
* per target (:func:`diagnose_target`): the kernels' summed DRAM bytes against the fused-bytes model
  (inputs read once, outputs written once), executed tensor FLOPs against the model's FLOPs, the
  SOL fraction from the harness's time (never ncu's replay time), and the seed's tier
  (< 60 % fuse and fix memory access; 60-80 % scheduling and register reuse; > 80 % hardware
  features).

ncu percentages are relative to per-cycle peaks at the clock measured during the kernel; SOL
fractions are relative to the datasheet (or calibrated) ceilings. Both are reported, never mixed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from solkit.profile.ncu_parse import KernelMetrics

#: Thresholds (fractions in %), named so the rules read like the advice they give.
LATENCY_PCT = 60.0
AT_ROOF_PCT = 80.0
GAP_PCT = 10.0
LOW_OCCUPANCY_PCT = 40.0
HIGH_REGISTERS = 128
POOR_SECTOR_USE_PCT = 40.0  # 16-B vector loads at a 32-B stride read 50 % per instruction, fine
LOW_L2_HIT_PCT = 50.0
IDLE_TENSOR_PCT = 5.0
TINY_KERNEL_US = 5.0
EXCESS_BYTES = 1.25
MISSING_FUSION_BYTES = 2.0


@dataclass
class Finding:
    """One observation with its evidence and the change it suggests."""

    code: str  # stable identifier, e.g. "register_pressure"
    severity: str  # "high" | "medium" | "info"
    message: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def _v(k: KernelMetrics, key: str) -> float | None:
    return k.metrics.get(key)


def fp32_flops(k: KernelMetrics) -> float | None:
    """FP32 FLOPs executed: FADD + FMUL + 2 x FFMA (thread-level instruction counts)."""
    parts = [_v(k, "fp32_fadd"), _v(k, "fp32_fmul"), _v(k, "fp32_ffma")]
    if all(p is None for p in parts):
        return None
    a, m, f = (p or 0.0 for p in parts)
    return a + m + 2 * f


def fp16_flops(k: KernelMetrics) -> float | None:
    """FP16 FLOPs executed, counting the packed HADD2/HMUL2/HFMA2 forms as ncu's roofline does
    (x2 for add/mul, x4 for fma): an upper estimate when unpacked forms are used."""
    parts = [_v(k, "fp16_hadd"), _v(k, "fp16_hmul"), _v(k, "fp16_hfma")]
    if all(p is None for p in parts):
        return None
    a, m, f = (p or 0.0 for p in parts)
    return 2 * a + 2 * m + 4 * f


def tensor_flops(k: KernelMetrics) -> float | None:
    """Tensor-core operations executed (all precisions; includes tile padding)."""
    parts = [_v(k, x) for x in ("tensor_ops_bf16", "tensor_ops_fp16", "tensor_ops_tf32", "tensor_ops_fp8")]
    if all(p is None for p in parts):
        return None
    return sum(p or 0.0 for p in parts)


def dram_bytes(k: KernelMetrics) -> float | None:
    r, w = _v(k, "dram_bytes_read"), _v(k, "dram_bytes_write")
    if r is None and w is None:
        return None
    return (r or 0.0) + (w or 0.0)


def classify_roof(sm_pct: float | None, mem_pct: float | None) -> str:
    """ncu's SOLBottleneck rule on SM and memory throughput (% of peak): ``compute roof`` /
    ``memory roof`` (>= 80 %), ``latency-bound`` (both < 60 %), ``compute-bound`` / ``memory-bound``
    (a gap of >= 10 points), else ``balanced``."""
    if sm_pct is None or mem_pct is None:
        return "unknown"
    if sm_pct >= AT_ROOF_PCT or mem_pct >= AT_ROOF_PCT:
        return "compute roof" if sm_pct >= mem_pct else "memory roof"
    if sm_pct < LATENCY_PCT and mem_pct < LATENCY_PCT:
        return "latency-bound"
    if abs(sm_pct - mem_pct) >= GAP_PCT:
        return "compute-bound" if sm_pct > mem_pct else "memory-bound"
    return "balanced"


def diagnose_kernel(k: KernelMetrics, sm_count: int | None = None, gemm_expected: bool = False) -> dict[str, Any]:
    """Roof and findings for one kernel. ``gemm_expected``: the target's model has tensor-core FLOPs."""
    # Long on purpose: a table of rules read top to bottom, each finding next to the metrics it uses.
    sm = _v(k, "sm_throughput_pct")
    mem = _v(k, "memory_throughput_pct")
    dram = _v(k, "dram_throughput_pct")
    mem_for_roof = mem if mem is not None else dram
    roof = classify_roof(sm, mem_for_roof)
    dur_us = (_v(k, "duration_ns") or 0.0) / 1e3
    findings: list[Finding] = []
    occ, theo = _v(k, "achieved_occupancy_pct"), _v(k, "theoretical_occupancy_pct")
    regs = _v(k, "registers_per_thread")
    limits = {name: _v(k, f"occupancy_limit_{name}") for name in ("registers", "shared_mem", "warps", "blocks")}
    limiter = _occupancy_limiter(limits)
    waves = _v(k, "waves_per_sm")
    # With less than a wave of blocks, low occupancy is the grid's size, not the kernel's resources.
    fills_gpu = waves is None or waves >= 1.0
    if (
        occ is not None
        and occ < LOW_OCCUPANCY_PCT
        and fills_gpu
        and roof in ("latency-bound", "balanced", "memory-bound")
    ):
        if regs is not None and (regs >= HIGH_REGISTERS or (limiter == "registers" and regs >= 64)):
            findings.append(
                Finding(
                    "register_pressure",
                    "high",
                    f"achieved occupancy {occ:.0f}% with {regs:.0f} registers/thread"
                    + (
                        f" (registers allow only {limits['registers']:.0f} blocks/SM)"
                        if limiter == "registers" and limits["registers"]
                        else ""
                    )
                    + ": register pressure; cut live values, smaller tiles, or __launch_bounds__/num_warps tuning",
                )
            )
        elif limiter == "shared_mem":
            findings.append(
                Finding(
                    "smem_limited_occupancy",
                    "medium",
                    f"achieved occupancy {occ:.0f}%, limited by shared memory per block: "
                    "fewer pipeline stages or smaller tiles",
                )
            )
        else:
            findings.append(
                Finding(
                    "low_occupancy",
                    "medium",
                    f"achieved occupancy {occ:.0f}%"
                    + (f" of a theoretical {theo:.0f}%" if theo is not None else "")
                    + ": too few warps to hide memory latency; more blocks or more independent loads per thread",
                )
            )
    local = (_v(k, "local_load_sectors") or 0.0) + (_v(k, "local_store_sectors") or 0.0)
    if local > 0:
        findings.append(
            Finding(
                "local_memory",
                "high" if local * 32 > 0.05 * (dram_bytes(k) or 1e30) else "medium",
                f"{local * 32 / 1e6:.2f} MB of local-memory traffic: register spills or dynamically indexed arrays",
            )
        )
    sector = _v(k, "global_load_bytes_per_sector_pct")
    if sector and sector < POOR_SECTOR_USE_PCT and (dram or 0) > 20:  # 0/None: no LSU loads (TMA)
        findings.append(
            Finding(
                "uncoalesced",
                "medium",
                f"global load instructions use {sector:.0f}% of each 32-B sector they touch: strided or "
                "uncoalesced access; make consecutive threads read consecutive addresses",
            )
        )
    tensor_pct = _v(k, "tensor_pipe_pct")
    fp32 = fp32_flops(k) or 0.0
    if gemm_expected and tensor_pct is not None and tensor_pct < IDLE_TENSOR_PCT and fp32 > 1e8:
        findings.append(
            Finding(
                "no_mma",
                "high",
                f"tensor pipe {tensor_pct:.1f}% busy while {fp32 / 1e9:.1f} GFLOP run on FP32 FMA units: "
                "the matmul is not using MMA instructions (tl.dot / wgmma), or runs in fp32",
            )
        )
    l2_hit = _v(k, "l2_hit_rate_pct")
    if tensor_pct is not None and tensor_pct >= 20 and l2_hit is not None and l2_hit < LOW_L2_HIT_PCT:
        findings.append(
            Finding(
                "low_l2_reuse",
                "medium",
                f"L2 hit rate {l2_hit:.0f}% in a tensor-core kernel: tiles are re-fetched from DRAM; "
                "grouped/swizzled tile order or larger tiles improve reuse",
            )
        )
    if roof == "latency-bound":
        if dur_us < TINY_KERNEL_US:
            findings.append(
                Finding(
                    "tiny_kernel",
                    "medium",
                    f"{dur_us:.1f} us kernel: launch and tail effects dominate; "
                    "fuse it into a neighbour or use CUDA graphs",
                )
            )
        elif waves is not None and waves < 1.0:
            findings.append(
                Finding(
                    "under_one_wave",
                    "high",
                    f"latency-bound and only {waves:.2g} waves per SM"
                    + (f" ({sm_count} SMs)" if sm_count else "")
                    + ": too few blocks; split the work (split-K, more rows per program) to fill the GPU",
                )
            )
        else:
            findings.append(
                Finding(
                    "latency_bound",
                    "medium",
                    f"neither SM ({sm or 0:.0f}%) nor memory ({mem_for_roof or 0:.0f}%) near its peak: "
                    "stalls dominate; more independent work in flight (ILP, async copies, more warps)",
                )
            )
    elif roof == "memory roof" and (dram or 0) >= AT_ROOF_PCT:
        findings.append(
            Finding(
                "at_dram_roof",
                "info",
                f"DRAM at {dram:.0f}% of peak: only moving fewer bytes helps (fusion, lower precision, reuse)",
            )
        )
    elif roof == "memory-bound" and dram is not None and mem_for_roof is not None and mem_for_roof - dram >= GAP_PCT:
        findings.append(
            Finding(
                "cache_bound",
                "medium",
                f"memory pipes at {mem_for_roof:.0f}% but DRAM only {dram:.0f}%: "
                "L1/L2/shared-memory traffic is the limit; "
                "fewer redundant loads, better data layout, bank-conflict-free shared memory",
            )
        )
    return {
        "id": k.id,
        "name": k.name,
        "target": k.target,
        "roof": roof,
        "duration_us_ncu": dur_us,
        "sm_throughput_pct": sm,
        "memory_throughput_pct": mem,
        "dram_throughput_pct": dram,
        "dram_bytes": dram_bytes(k),
        "l2_bytes": _v(k, "l2_bytes"),
        "l2_hit_rate_pct": l2_hit,
        "achieved_occupancy_pct": occ,
        "theoretical_occupancy_pct": theo,
        "registers_per_thread": regs,
        "smem_per_block_bytes": (_v(k, "smem_static_bytes") or 0.0) + (_v(k, "smem_dynamic_bytes") or 0.0),
        "tensor_pipe_pct": tensor_pct,
        "fp32_flops": fp32_flops(k),
        "fp16_flops": fp16_flops(k),
        "tensor_flops": tensor_flops(k),
        "sm_clock_mhz": (_v(k, "sm_clock_hz") or 0.0) / 1e6 or None,
        "waves_per_sm": waves,
        "findings": [f.to_dict() for f in findings],
        "metrics": dict(k.metrics),
    }


def _occupancy_limiter(limits: dict[str, float | None]) -> str | None:
    """The resource that caps blocks per SM, only when it is strictly tighter than the rest (a tie
    with the warp limit means the block size, not registers or shared memory, is the cap)."""
    known = {n: v for n, v in limits.items() if v is not None}
    if not known:
        return None
    low = min(known.values())
    tied = [n for n, v in known.items() if v == low]
    return tied[0] if len(tied) == 1 else None


def _sum(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) if vals else None


def diagnose_target(
    kernels: list[KernelMetrics],
    *,
    model_bytes: float | None,
    model_flops: dict[str, float] | None,
    t_measured_s: float | None,
    ceilings: Any | None = None,
    sm_count: int | None = None,
    telemetry: dict[str, Any] | None = None,
    model_unfused_bytes: float | None = None,
) -> dict[str, Any]:
    """Everything known about one target: model vs counters, SOL fraction, tier, findings.

    ``model_unfused_bytes`` (what op-by-op execution moves) refines the excess-traffic advice: DRAM
    bytes near it mean unfused intermediates; beyond it, kernels also re-read their own data."""
    # Long on purpose: a table of rules read top to bottom, each finding next to the model it compares with.
    model_flops = {u: f for u, f in (model_flops or {}).items() if f}
    gemm = any(u.endswith("_tensor") for u in model_flops)
    per_kernel = [diagnose_kernel(k, sm_count, gemm_expected=gemm) for k in kernels]
    findings: list[Finding] = []
    out: dict[str, Any] = {"n_kernels": len(kernels)}
    total_dram = _sum([kd["dram_bytes"] for kd in per_kernel])
    out["dram_bytes"] = total_dram
    out["model_bytes"] = model_bytes
    out["model_unfused_bytes"] = model_unfused_bytes
    out["dram_vs_model"] = total_dram / model_bytes if total_dram is not None and model_bytes else None
    total_tensor = _sum([kd["tensor_flops"] for kd in per_kernel])
    model_total = sum(model_flops.values())
    out["model_flops"] = model_flops
    out["tensor_flops"] = total_tensor
    out["fp32_flops"] = _sum([kd["fp32_flops"] for kd in per_kernel])
    out["tensor_flops_vs_model"] = total_tensor / model_total if total_tensor is not None and model_total else None
    out["ncu_time_us"] = _sum([kd["duration_us_ncu"] for kd in per_kernel])

    sol = sol_block(model_flops, model_bytes, t_measured_s, ceilings)
    ratio = out["dram_vs_model"]
    dram_busy = max((kd["dram_throughput_pct"] or 0.0 for kd in per_kernel), default=0.0)
    compute_bound = (sol or {}).get("bound") == "compute" or (sol is None and gemm)
    if ratio is not None and ratio >= EXCESS_BYTES and compute_bound and dram_busy < LATENCY_PCT:
        findings.append(
            Finding(
                "tile_rereads",
                "info",
                f"DRAM traffic {ratio:.2f}x the fused-bytes model (operand tiles re-fetched after L2 misses); "
                f"harmless while compute-bound (DRAM at most {dram_busy:.0f}% busy)",
            )
        )
    elif ratio is not None:
        if ratio >= MISSING_FUSION_BYTES:
            why = (
                f"{len(kernels)} kernels each round-trip intermediates through DRAM: fuse them into one pass"
                if len(kernels) > 1
                else "the kernel re-reads its inputs (tiles not reused, or the reduction reloads rows): "
                "keep data on chip"
            )
            if model_unfused_bytes and total_dram is not None and total_dram > 1.2 * model_unfused_bytes:
                why += (
                    f"; it even exceeds the op-by-op model ({total_dram / model_unfused_bytes:.2f}x its "
                    f"{model_unfused_bytes / 1e6:.0f} MB), so kernels also re-read their own data (operand tiles "
                    "re-fetched, or multi-pass reductions over rows larger than on-chip memory)"
                )
            findings.append(
                Finding("excess_dram_traffic", "high", f"DRAM traffic {ratio:.2f}x the fused-bytes model: {why}")
            )
        elif ratio >= EXCESS_BYTES:
            findings.append(
                Finding(
                    "extra_dram_traffic",
                    "medium",
                    f"DRAM traffic {ratio:.2f}x the fused-bytes model: some re-reads, uncoalesced access, "
                    "spills or an unfused intermediate",
                )
            )
        elif ratio < 0.8:
            findings.append(
                Finding(
                    "below_model_traffic",
                    "info",
                    f"DRAM traffic {ratio:.2f}x the model: part of the output was still in L2 (not yet written "
                    "back) when the kernel ended, or inputs were L2-resident",
                )
            )
    if gemm and model_total and total_tensor is not None:
        r = total_tensor / model_total
        if r < 0.1:
            findings.append(
                Finding(
                    "no_tensor_cores",
                    "high",
                    f"executed tensor-core FLOPs are {r:.0%} of the model's matmul FLOPs: the matmul does not use MMA",
                )
            )
        elif r > 1.05:
            findings.append(
                Finding(
                    "extra_flops",
                    "info",
                    f"tensor-core work {r:.2f}x the model: tile padding or recomputation",
                )
            )

    if sol and sol.get("violation"):
        findings.append(
            Finding(
                "sol_violation",
                "high",
                f"measured {sol['t_measured_ms']:.4f} ms is below T_SOL {sol['t_sol_ms']:.4f} ms: a model or timer bug",
            )
        )
    out["sol"] = sol
    if telemetry and telemetry.get("throttled"):
        findings.append(Finding("throttled", "medium", telemetry.get("warning") or "GPU throttled during timing"))
    # The heaviest kernel's own findings matter most: surface them at target level.
    if per_kernel:
        top = max(per_kernel, key=lambda kd: kd["duration_us_ncu"] or 0.0)
        out["dominant_kernel"] = {
            "name": top["name"],
            "roof": top["roof"],
            "share_of_ncu_time": (top["duration_us_ncu"] or 0) / (out["ncu_time_us"] or 1),
        }
    out["findings"] = [f.to_dict() for f in findings]
    out["kernels"] = per_kernel
    out["summary"] = summary_line(out)
    return out


def sol_block(
    model_flops: dict[str, float] | None, model_bytes: float | None, t_measured_s: float | None, ceilings: Any | None
) -> dict[str, Any] | None:
    """T_SOL, SOL fraction and tier of the harness's time on one basis of ceilings (None if unknown)."""
    model_flops = {u: f for u, f in (model_flops or {}).items() if f}
    model_total = sum(model_flops.values())
    if ceilings is None or not t_measured_s or not (model_bytes or model_total):
        return None
    from solkit.sol.model import sol_fraction, t_sol
    from solkit.sol.tiers import tier_for

    try:
        res = t_sol(model_flops, model_bytes or 0.0, ceilings)
        score = sol_fraction(res.t_sol_s, t_measured_s)
        tier = tier_for(score.sol_fraction, res.bound)
    except Exception as exc:  # a model the ceilings cannot price (e.g. an unknown unit) is reported, not fatal
        return {"basis": getattr(ceilings, "basis", "?"), "error": f"{type(exc).__name__}: {exc}"}
    return {
        "basis": ceilings.basis,
        "arch": ceilings.arch,
        "t_sol_ms": res.t_sol_ms,
        "bound": res.bound,
        "t_measured_ms": t_measured_s * 1e3,
        "sol_fraction": score.sol_fraction,
        "raw_fraction": score.raw_fraction,
        "violation": score.violation,
        "achieved_bandwidth_tbs": (model_bytes or 0.0) / t_measured_s / 1e12,
        "achieved_tflops": model_total / t_measured_s / 1e12 if model_total else None,
        "tier": {"name": tier.name, "label": tier.label, "advice": tier.advice},
    }


def summary_line(diag: dict[str, Any]) -> str:
    """One line for tables: SOL %, tier, dominant roof, and the most severe finding."""
    parts = []
    sol = diag.get("sol") or {}
    if sol.get("sol_fraction") is not None:
        parts.append(f"{sol['sol_fraction']:.0%} of SOL ({sol.get('tier', {}).get('label', '?')})")
    dom = diag.get("dominant_kernel")
    if dom:
        parts.append(f"dominant kernel at {dom['roof']}" if dom["roof"].endswith("roof") else dom["roof"])
    all_findings = list(diag.get("findings", []))
    for kd in diag.get("kernels", []):
        all_findings += kd["findings"]
    rank = {"high": 0, "medium": 1, "info": 2}
    if all_findings:
        best = min(all_findings, key=lambda f: rank.get(f["severity"], 3))
        parts.append(best["message"].split(":")[0])
    return "; ".join(parts) if parts else "no counters"
