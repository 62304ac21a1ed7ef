"""The profile pipeline's GPU path simulated on the CPU: a fake timing run, a fake ncu whose CSV names
the targets through NVTX, spec ceilings of an H200. Also each degradation branch."""

from __future__ import annotations

import csv
import io
import stat
import sys
from pathlib import Path

import pytest

from solkit.profile import bench_hook, runner
from solkit.profile.ncu_parse import METRICS
from solkit.profile.report import to_html, to_json, to_markdown
from solkit.sol.ceilings import spec_ceilings

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "benchmarks" / "profile_problems"
FIX = Path(__file__).parent / "fixtures"

FAKE_NCU = r"""#!{python}
import os, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("Version 2025.3.1.0"); sys.exit(0)
if "--import" in args:
    sys.stdout.write(open(os.environ["FAKE_NCU_CSV"]).read()); sys.exit(0)
if os.environ.get("FAKE_NCU_MODE") == "perm":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
    sys.exit(1)
open(args[args.index("--export") + 1], "w").write("x")
"""


def _csv(rows: list[tuple[str, str, dict[str, float]]]) -> str:
    names = sorted(set(METRICS.values()))
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(["ID", "Process ID", "Process Name", "Host Name", "NVTX", "Kernel Name", "Context", "Stream"] + names)
    w.writerow([""] * 8 + ["" for _ in names])
    for i, (nvtx, kname, vals) in enumerate(rows):
        w.writerow([str(i), "1", "python3", "h", nvtx, kname, "1", "7"] + [f"{vals.get(n, 0):,}" for n in names])
    return buf.getvalue()


def _k(**kw):
    m = {v: 0 for v in METRICS.values()}
    short = {
        "dur": "gpu__time_duration.sum",
        "sm": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "mem": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "rd": "dram__bytes_read.sum",
        "wr": "dram__bytes_write.sum",
        "occ": "sm__warps_active.avg.pct_of_peak_sustained_active",
        "regs": "launch__registers_per_thread",
        "tensor": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "tops": "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
        "waves": "launch__waves_per_multiprocessor",
    }
    for k, v in kw.items():
        m[short[k]] = v
    return m


@pytest.fixture
def simulated_gpu(tmp_path, monkeypatch):
    targets = runner.plan_targets([PROBLEMS / "rmsnorm", PROBLEMS / "gemm"], None, None)
    labels = [t["label"] for t in targets]
    mb = 16384 * 4096 * 2 * 2 + 4096 * 2
    rows = [
        # eager RMSNorm: 4 kernels, each a DRAM round trip -> ~3x the model's bytes
        (
            f"solkit:{labels[0]}",
            "elementwise_kernel_to_float",
            _k(dur=60000, sm=20, mem=88, dram=88, rd=134e6, wr=268e6, occ=85, regs=24, waves=8),
        ),
        (
            f"solkit:{labels[0]}",
            "reduce_kernel_mean",
            _k(dur=50000, sm=30, mem=85, dram=85, rd=268e6, wr=1e5, occ=80, regs=32, waves=8),
        ),
        (
            f"solkit:{labels[0]}",
            "elementwise_kernel_mul",
            _k(dur=70000, sm=25, mem=87, dram=87, rd=268e6, wr=268e6, occ=85, regs=24, waves=8),
        ),
        (
            f"solkit:{labels[0]}",
            "elementwise_kernel_to_bf16",
            _k(dur=50000, sm=20, mem=86, dram=86, rd=268e6, wr=134e6, occ=85, regs=24, waves=8),
        ),
        # solkit RMSNorm: one kernel at the model's bytes, at the DRAM roof
        (
            f"solkit:{labels[1]}",
            "_rmsnorm_fwd_kernel",
            _k(dur=36000, sm=35, mem=90, dram=90, rd=134.2e6, wr=134.2e6, occ=70, regs=40, waves=4),
        ),
        # simple RMSNorm: register pressure
        (
            f"solkit:{labels[2]}",
            "_rmsnorm_rows",
            _k(dur=60000, sm=30, mem=50, dram=50, rd=134.2e6, wr=134.2e6, occ=18, regs=255, waves=9),
        ),
        # GEMM reference: cuBLAS at the compute roof
        (
            f"solkit:{labels[3]}",
            "nvjet_gemm",
            _k(
                dur=190000, sm=93, mem=90, dram=20, rd=70e6, wr=34e6, occ=12, regs=168, tensor=97, tops=1.39e11, waves=1
            ),
        ),
        # GEMM solkit
        (
            f"solkit:{labels[4]}",
            "_gemm_tma_persistent_kernel",
            _k(
                dur=200000, sm=90, mem=88, dram=22, rd=72e6, wr=34e6, occ=12, regs=168, tensor=92, tops=1.39e11, waves=1
            ),
        ),
        # GEMM simple: idle tensor pipe (pretend it fell back to FMA)
        (
            f"solkit:{labels[5]}",
            "_matmul",
            _k(dur=900000, sm=70, mem=40, dram=10, rd=80e6, wr=34e6, occ=25, regs=128, tensor=0.5, tops=0, waves=2)
            | {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 6.8e10},
        ),
    ]
    assert len(labels) == 6 and mb == 268443648
    csv_path = tmp_path / "fake.csv"
    csv_path.write_text(_csv(rows))
    exe = tmp_path / "ncu"
    exe.write_text(FAKE_NCU.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("FAKE_NCU_CSV", str(csv_path))
    monkeypatch.setenv("SOLKIT_NCU", str(exe))
    monkeypatch.setattr(runner, "_gpu_info", lambda: {"available": True, "name": "NVIDIA H200", "sm_count": 132})
    monkeypatch.setattr(runner, "_ceilings", lambda: (spec_ceilings("h200-sxm"), None, None))
    times = [0.25, 0.062, 0.09, 0.2, 0.21, 0.95]

    def fake_driver(spec, workdir, name, timeout_s):
        out = []
        for t, ms in zip(spec["targets"], times):
            gemm = "gemm" in t["label"]
            out.append(
                {
                    "label": t["label"],
                    "ok": True,
                    "problem": t["label"].split(".")[0],
                    "workload": "w",
                    "kind": "x",
                    "model_bytes": 3 * 4096 * 4096 * 2 if gemm else mb,
                    "model_flops": {"bf16_tensor": 2 * 4096**3} if gemm else {},
                    "timing": {"median_ms": ms},
                    "telemetry": {"available": True, "throttled": False},
                    "kernels": [],
                }
            )
        return {"targets": out, "versions": {"torch": "2.11"}}, ""

    monkeypatch.setattr(runner, "_run_driver", fake_driver)
    return targets


def _codes(diag):
    codes = {f["code"] for f in diag["findings"]}
    for k in diag["kernels"]:
        codes |= {f["code"] for f in k["findings"]}
    return codes


def test_simulated_gpu_profile(simulated_gpu, tmp_path):
    report = runner.profile([], targets=simulated_gpu, out_dir=tmp_path / "out")
    assert report["degraded"] == []
    by = {t["label"].split(".", 1)[1] + "@" + t["label"].split("_")[0]: t["diagnosis"] for t in report["targets"]}
    eager = by["reference@rmsnorm"]
    assert eager["n_kernels"] == 4
    assert eager["dram_vs_model"] == pytest.approx((134e6 + 268e6 * 5 + 1e5 + 134e6) / 268443648, rel=1e-6)
    assert "excess_dram_traffic" in _codes(eager)
    assert eager["sol"]["tier"]["name"] == "fuse-and-fix-memory"
    fused = by["solkit@rmsnorm"]
    assert fused["n_kernels"] == 1 and "excess_dram_traffic" not in _codes(fused)
    assert "at_dram_roof" in _codes(fused)
    assert fused["sol"]["sol_fraction"] == pytest.approx(268443648 / 4.8e12 / 62e-6, rel=1e-6)
    assert "register_pressure" in _codes(by["simple@rmsnorm"])
    cublas = by["reference@gemm"]
    assert cublas["kernels"][0]["roof"] == "compute roof"
    assert cublas["tensor_flops_vs_model"] == pytest.approx(1.39e11 / (2 * 4096**3))
    simple = by["simple@gemm"]
    assert {"no_mma", "no_tensor_cores"} <= _codes(simple)
    md, page, js = to_markdown(report), to_html(report), to_json(report)
    (tmp_path / "sim.md").write_text(md)
    assert "excess" not in md or "DRAM traffic" in md
    assert "<script" not in page and "http" not in page.split("</style>")[1]
    assert '"schema_version": 1' in js


def test_simulated_no_ncu(simulated_gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("SOLKIT_NCU", str(tmp_path / "missing"))
    monkeypatch.setattr(runner.ncu_mod.shutil, "which", lambda name: None)
    monkeypatch.setattr(runner.ncu_mod, "find_ncu", lambda: None)
    report = runner.profile([], targets=simulated_gpu, out_dir=tmp_path / "out")
    assert len(report["degraded"]) == 1 and report["degraded"][0].startswith("ncu not found")
    assert all(t["diagnosis"]["n_kernels"] == 0 for t in report["targets"])
    assert report["targets"][0]["diagnosis"]["sol"]["sol_fraction"] > 0  # timing + model still work


def test_simulated_no_permission(simulated_gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    report = runner.profile([], targets=simulated_gpu, out_dir=tmp_path / "out")
    assert len(report["degraded"]) == 1 and "ERR_NVGPUCTRPERM" in report["degraded"][0]
    assert report["ncu"]["error"]["kind"] == "no_permission"


def test_plan_targets_errors(tmp_path):
    from solkit.errors import SolkitError

    with pytest.raises(SolkitError, match="file not found"):
        runner.plan_targets([PROBLEMS / "gemm", PROBLEMS / "rmsnorm"], "x.json", None)
    with pytest.raises(SolkitError, match="none of the problems"):
        runner.plan_targets([PROBLEMS / "gemm"], [PROBLEMS / "rmsnorm" / "solution.json"], None)
    both = runner.plan_targets(
        [PROBLEMS / "gemm", PROBLEMS / "rmsnorm"],
        [PROBLEMS / "rmsnorm" / "solution.json", PROBLEMS / "gemm" / "solution_simple.json"],
        ["gemm-m4096", "rmsnorm-m7"],
    )
    assert [(t["label"], t["workload"]) for t in both] == [
        ("gemm_bf16_4096.reference", "gemm-m4096"),
        ("gemm_bf16_4096.simple", "gemm-m4096"),
        ("rmsnorm_bf16_h4096.reference", "rmsnorm-m7"),
        ("rmsnorm_bf16_h4096.solkit", "rmsnorm-m7"),
    ]
    with pytest.raises(SolkitError, match="not a problem directory"):
        runner.plan_targets([tmp_path / "nope"], None, None)
    labels = [t["label"] for t in runner.plan_targets([PROBLEMS / "rmsnorm"], None, None)]
    assert labels == ["rmsnorm_bf16_h4096.reference", "rmsnorm_bf16_h4096.solkit", "rmsnorm_bf16_h4096.simple"]


def test_diagnose_for_bench_one_line(simulated_gpu, tmp_path):
    out = bench_hook.diagnose_for_bench(
        PROBLEMS / "gemm", solution=PROBLEMS / "gemm" / "solution_simple.json", out_dir=tmp_path / "b"
    )
    assert out["label"] == "gemm_bf16_4096.simple"
    assert out["n_kernels"] == 1 and out["findings"][0]["severity"] == "high"
    assert {f["code"] for f in out["findings"]} >= {"no_mma"}
    assert "of SOL" in out["summary"] and "\n" not in out["summary"]
    assert out["report"]["diagnosis"]["sol"]["bound"] == "compute"


def test_diagnose_for_bench_on_cpu_degrades_but_keeps_the_model(tmp_path):
    tiny = Path(__file__).parent / "problems" / "tiny_rmsnorm"
    out = bench_hook.diagnose_for_bench(tiny, t_measured_ms=0.01, out_dir=tmp_path / "b")
    assert out["degraded"] and out["degraded"][0].startswith("no CUDA GPU")
    assert out["n_kernels"] == 0 and "\n" not in out["summary"]
    t = out["report"]
    assert t["ok"] and t["diagnosis"]["model_bytes"] == (5 * 64 * 2 + 64) * 4


def test_batch_labels_stay_unique(monkeypatch, tmp_path):
    seen = {}

    def fake_profile(problem_dirs, *, targets, out_dir, timeout_s, timing, t_measured_ms):
        seen.update(timing=timing, t=t_measured_ms, labels=[t["label"] for t in targets])
        entry = lambda t: {
            "label": t["label"],
            "ok": True,
            "diagnosis": {"findings": [], "kernels": [], "summary": "x", "n_kernels": 0, "sol": None},
        }
        return {"targets": [entry(t) for t in targets], "degraded": []}

    monkeypatch.setattr(bench_hook, "profile", fake_profile)
    sol = PROBLEMS / "rmsnorm" / "solution.json"
    rows = bench_hook.diagnose_batch_for_bench(
        [
            {"problem_dir": PROBLEMS / "rmsnorm", "solution": sol, "workload": "rmsnorm-m16384", "t_measured_ms": 0.04},
            {"problem_dir": PROBLEMS / "rmsnorm", "solution": sol, "workload": "rmsnorm-m7", "t_measured_ms": 0.01},
            {"problem_dir": PROBLEMS / "rmsnorm"},
        ]
    )
    labels = ["rmsnorm_bf16_h4096.solkit", "rmsnorm_bf16_h4096.solkit.1", "rmsnorm_bf16_h4096.reference"]
    assert [r["label"] for r in rows] == labels == seen["labels"]
    assert seen["timing"] is True  # one item has no time of its own
    assert seen["t"] == {labels[0]: 0.04, labels[1]: 0.01}


FAKE_NCU_RUNS_DRIVER = r"""#!{python}
import json, os, subprocess, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("Version 2025.3.1.0"); sys.exit(0)
if "--import" in args:
    sys.stdout.write(open(os.environ["FAKE_NCU_CSV"]).read()); sys.exit(0)
# run the real driver, but as a CPU "model" pass (this machine has no GPU to profile)
spec_path, result_path = args[-2], args[-1]
spec = json.load(open(spec_path))
spec.update(mode="model", device="cpu")
json.dump(spec, open(spec_path, "w"))
subprocess.run([sys.executable, "-m", "solkit.profile.driver", spec_path, result_path], check=True)
open(args[args.index("--export") + 1], "w").write("x")
"""


def test_bench_hook_ncu_only_path_uses_the_ncu_runs_model(tmp_path, monkeypatch):
    """With the caller's time, only the ncu run happens; the model comes from its driver result."""
    tiny = Path(__file__).parent / "problems" / "tiny_rmsnorm"
    label = "rmsnorm_f32_h64.solution_torch"
    csv_path = tmp_path / "fake.csv"
    csv_path.write_text(
        _csv(
            [
                (
                    f"solkit:{label}",
                    "rms_kernel",
                    _k(dur=3000, sm=10, mem=20, dram=20, rd=1500, wr=1300, occ=30, regs=32, waves=0.1),
                )
            ]
        )
    )
    exe = tmp_path / "ncu"
    exe.write_text(FAKE_NCU_RUNS_DRIVER.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("FAKE_NCU_CSV", str(csv_path))
    monkeypatch.setenv("SOLKIT_NCU", str(exe))
    monkeypatch.setattr(runner, "_gpu_info", lambda: {"available": True, "name": "NVIDIA H200", "sm_count": 132})
    monkeypatch.setattr(runner, "_ceilings", lambda: (spec_ceilings("h200-sxm"), None, None))
    called = []
    monkeypatch.setattr(runner, "_run_driver", lambda *a, **k: called.append(a) or (None, "must not run"))
    out = bench_hook.diagnose_for_bench(
        tiny, solution=tiny / "solution_torch.py", t_measured_ms=0.004, out_dir=tmp_path / "w"
    )
    assert called == []  # no timing run, no model run: the ncu run's driver result had the model
    assert out["label"] == label and out["n_kernels"] == 1 and out["degraded"] == []
    d = out["report"]["diagnosis"]
    assert d["model_bytes"] == (5 * 64 * 2 + 64) * 4 and d["dram_vs_model"] == pytest.approx(2800 / 2816)
    assert d["sol"]["t_measured_ms"] == 0.004 and out["sol_fraction"] == pytest.approx(2816 / 4.8e12 / 4e-6)
