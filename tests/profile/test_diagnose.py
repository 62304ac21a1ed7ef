"""Diagnosis rules: roof classification, per-kernel advice from counters, target-level model checks."""

from __future__ import annotations

import pytest

from solkit.profile.diagnose import classify_roof, diagnose_kernel, diagnose_target, fp16_flops, fp32_flops, sol_block
from solkit.profile.ncu_parse import METRICS, KernelMetrics
from solkit.sol.ceilings import spec_ceilings


def K(name="k", target="t", **m) -> KernelMetrics:
    metrics = dict.fromkeys(METRICS)
    metrics.update(m)
    return KernelMetrics(0, name, metrics, target=target)


def codes(d):
    return {f["code"] for f in d["findings"]}


@pytest.mark.parametrize(
    "sm,mem,roof",
    [
        (92, 30, "compute roof"),
        (20, 85, "memory roof"),
        (80, 80, "compute roof"),
        (30, 40, "latency-bound"),
        (75, 50, "compute-bound"),
        (55, 70, "memory-bound"),
        (65, 70, "balanced"),
        (None, 50, "unknown"),
    ],
)
def test_classify_roof(sm, mem, roof):
    assert classify_roof(sm, mem) == roof


def test_register_pressure_needs_low_occupancy_and_many_registers():
    base = dict(sm_throughput_pct=30, memory_throughput_pct=45, dram_throughput_pct=45, duration_ns=50_000)
    assert "register_pressure" in codes(diagnose_kernel(K(**base, achieved_occupancy_pct=20, registers_per_thread=200)))
    assert "register_pressure" in codes(
        diagnose_kernel(
            K(
                **base,
                achieved_occupancy_pct=20,
                registers_per_thread=64,
                occupancy_limit_registers=2,
                occupancy_limit_warps=8,
                occupancy_limit_shared_mem=16,
                occupancy_limit_blocks=32,
            )
        )
    )
    low = diagnose_kernel(K(**base, achieved_occupancy_pct=20, registers_per_thread=32))
    assert "register_pressure" not in codes(low) and "low_occupancy" in codes(low)
    assert not {"register_pressure", "low_occupancy"} & codes(
        diagnose_kernel(K(**base, achieved_occupancy_pct=70, registers_per_thread=200))
    )


def test_spills_uncoalesced_and_latency_rules():
    d = diagnose_kernel(
        K(
            sm_throughput_pct=20,
            memory_throughput_pct=40,
            dram_throughput_pct=40,
            duration_ns=80_000,
            local_load_sectors=1e6,
            local_store_sectors=1e6,
            dram_bytes_read=1e8,
            dram_bytes_write=1e7,
            global_load_bytes_per_sector_pct=25.0,
            waves_per_sm=0.5,
        )
    )
    assert {"local_memory", "uncoalesced", "under_one_wave"} <= codes(d)
    assert d["roof"] == "latency-bound"
    tiny = diagnose_kernel(K(sm_throughput_pct=5, memory_throughput_pct=5, duration_ns=2_500, waves_per_sm=3))
    assert "tiny_kernel" in codes(tiny)
    # TMA loads leave the LSU sector metric at 0: not "uncoalesced"
    tma = diagnose_kernel(
        K(sm_throughput_pct=90, memory_throughput_pct=60, dram_throughput_pct=30, global_load_bytes_per_sector_pct=0.0)
    )
    assert "uncoalesced" not in codes(tma)


def test_idle_tensor_pipe_in_a_gemm():
    k = K(sm_throughput_pct=70, memory_throughput_pct=40, tensor_pipe_pct=0.2, fp32_ffma=3e10, fp32_fadd=0, fp32_fmul=0)
    assert "no_mma" in codes(diagnose_kernel(k, gemm_expected=True))
    assert "no_mma" not in codes(diagnose_kernel(k, gemm_expected=False))


def test_flop_counts():
    k = K(fp32_fadd=1, fp32_fmul=2, fp32_ffma=3, fp16_hadd=1, fp16_hmul=None, fp16_hfma=2)
    assert fp32_flops(k) == 1 + 2 + 6
    assert fp16_flops(k) == 2 + 0 + 8
    assert fp32_flops(K()) is None


def test_target_dram_vs_model_and_tiers():
    h200 = spec_ceilings("h200-sxm")
    model = 268_443_648
    one_pass = K(
        sm_throughput_pct=30,
        memory_throughput_pct=90,
        dram_throughput_pct=90,
        duration_ns=60_000,
        dram_bytes_read=model / 2,
        dram_bytes_write=model / 2,
    )
    d = diagnose_target([one_pass], model_bytes=model, model_flops={}, t_measured_s=62e-6, ceilings=h200)
    assert d["dram_vs_model"] == pytest.approx(1.0)
    assert not codes(d) and d["sol"]["tier"]["name"] == "near-the-limit"
    three = [
        K(
            name=f"k{i}",
            sm_throughput_pct=20,
            memory_throughput_pct=85,
            dram_throughput_pct=85,
            duration_ns=60_000,
            dram_bytes_read=model,
            dram_bytes_write=model / 2,
        )
        for i in range(3)
    ]
    d3 = diagnose_target(three, model_bytes=model, model_flops={}, t_measured_s=250e-6, ceilings=h200)
    assert "excess_dram_traffic" in codes(d3) and "3 kernels" in d3["findings"][0]["message"]
    assert d3["sol"]["tier"]["name"] == "fuse-and-fix-memory"
    mid = diagnose_target([one_pass], model_bytes=model, model_flops={}, t_measured_s=80e-6, ceilings=h200)
    assert mid["sol"]["tier"]["label"] == "60-80 %"
    l2 = diagnose_target(
        [K(dram_bytes_read=model * 0.3, dram_bytes_write=0)], model_bytes=model, model_flops={}, t_measured_s=None
    )
    assert "below_model_traffic" in codes(l2) and l2["sol"] is None


def test_target_tensor_flops_vs_model_and_violation():
    h200 = spec_ceilings("h200-sxm")
    flops = {"bf16_tensor": 2 * 4096**3}
    k = K(
        sm_throughput_pct=93,
        memory_throughput_pct=90,
        tensor_ops_bf16=0.0,
        fp32_ffma=6.9e10,
        tensor_pipe_pct=0.0,
        dram_bytes_read=1e8,
        dram_bytes_write=3e7,
    )
    d = diagnose_target([k], model_bytes=1e8, model_flops=flops, t_measured_s=1e-3, ceilings=h200)
    assert {"no_tensor_cores"} <= codes(d)
    fast = diagnose_target([], model_bytes=1e8, model_flops=flops, t_measured_s=1e-5, ceilings=h200)
    assert fast["sol"]["violation"] and "sol_violation" in codes(fast) and fast["sol"]["sol_fraction"] == 1.0
    assert sol_block({}, None, 1e-3, h200) is None
    bad = sol_block({"nonexistent_unit": 1e9}, 1.0, 1e-3, h200)
    assert "error" in bad


def test_throttle_is_a_finding():
    d = diagnose_target(
        [],
        model_bytes=1e6,
        model_flops={},
        t_measured_s=1e-3,
        ceilings=None,
        telemetry={"throttled": True, "warning": "GPU throttled (sw_power_cap)"},
    )
    assert "throttled" in codes(d)
