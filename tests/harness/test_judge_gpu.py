"""The judge against GPU attacks, on a CUDA device (issue 20): side streams, memoisation across timed calls, L2
persistence, work moved to another thread.

Each hostile candidate runs through the whole judge on an 8 MB RMSNorm (``cheat-gpu-l2-rows2048-h1024``) and
must end non-PASSED, or PASSED at no gain: a latency at least ``NO_GAIN`` times its honest twin's (the same
fused RMSNorm, ``gpu_l2_twin``). With ``SOLKIT_JUDGE_GPU_RESULTS=path`` set, every case's row (expected and
measured status, latency, the timing's between-call record, foreign GPU time, hidden work) is written there;
``benchmarks/gpu_jobs/judge_gpu.sh`` commits it as a results file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
import time
from pathlib import Path

import pytest
import torch
from harness_helpers import CHEAT_PROBLEM, CHEATS, EXAMPLES, fast_options, small_workloads

from solkit import timing
from solkit.harness import timed
from solkit.harness.evaluate import evaluate

pytestmark = pytest.mark.gpu

WORKLOAD = "cheat-gpu-l2-rows2048-h1024"
#: A contained timing attack is no faster than this fraction of its honest twin (noise of a ~10 µs kernel).
NO_GAIN = 0.85
#: Timing attacks, which may end PASSED if contained. The ones a status alone settles (gpu_event_fake_join,
#: side_stream, ...) run in test_cheats.py, which runs the whole corpus on the GPU when there is one.
HOSTILE = ["gpu_l2_persist", "gpu_memo_sampled", "gpu_memo_version", "gpu_thread_ahead", "address_cache"]
HONEST = ["gpu_side_stream_joined", "correct_triton"]
ROWS: dict[str, dict] = {}


def _write_rows() -> None:
    path = os.environ.get("SOLKIT_JUDGE_GPU_RESULTS")
    if path:
        with open(path, "w") as f:
            json.dump(ROWS, f, indent=1, default=str)


def _evaluate(case: str) -> dict:
    opts = fast_options(workloads=[WORKLOAD], reps=30, timing_trials=3, warmup=3, prewarm_s=0.1,
                        benchmark_reference=False, run_timeout=90)  # fmt: skip
    t0 = time.time()
    trace = evaluate(CHEAT_PROBLEM, CHEATS / case / "solution.json", opts)[0]
    e = trace.evaluation
    perf = e.performance
    tdict = (perf.timing or {}) if perf else {}
    row = {
        "case": case,
        "expected": json.loads((CHEATS / case / "expect.json").read_text())["statuses"],
        "status": e.status.value,
        "latency_ms": perf.latency_ms if perf else None,
        "timing_method": e.environment.timing_method if e.environment else None,
        "between_calls": tdict.get("between_calls"),
        "foreign_ms": tdict.get("foreign_ms"),
        "hidden_work": tdict.get("hidden_work"),
        "judge_clock": ((e.correctness.extra or {}).get("judge_clock") if e.correctness else None),
        "log": (e.log or "")[:400],
        "seconds": round(time.time() - t0, 2),
    }
    ROWS[case] = row
    _write_rows()
    return row


@pytest.fixture(scope="module")
def twin() -> dict:
    row = _evaluate("gpu_l2_twin")
    assert row["status"] == "PASSED", row["log"]
    return row


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_gpu_candidate_fails_or_gains_nothing(case, twin):
    row = _evaluate(case)
    assert row["status"] in row["expected"], row["log"]
    if row["status"] == "PASSED":
        row["vs_twin"] = row["latency_ms"] / twin["latency_ms"]
        _write_rows()
        assert row["vs_twin"] >= NO_GAIN, f"{case} passed {1 / row['vs_twin']:.2f}x faster than its honest twin"


@pytest.mark.parametrize("case", HONEST)
def test_honest_gpu_candidate_passes(case, twin):
    row = _evaluate(case)
    assert row["status"] == "PASSED", row["log"]
    row["vs_twin"] = row["latency_ms"] / twin["latency_ms"]
    _write_rows()


@pytest.mark.parametrize("problem,solution", [("gelu_add", "solution_pytorch.json")])
def test_honest_launch_bound_example_passes(problem, solution):
    """An eager PyTorch call of two tiny kernels: its host launch time far exceeds its kernel time, which alone is no
    sign of a forged timer (it was REWARD_HACK on the H200 before the GPU clock checks allowed for launch time)."""
    d = EXAMPLES / problem
    t0 = time.time()
    traces = evaluate(d, d / solution, fast_options(workloads=small_workloads(d), benchmark_reference=False))
    rows = []
    for t in traces:
        e = t.evaluation
        perf, extra = e.performance, (e.correctness.extra or {}) if e.correctness else {}
        rows.append({"uuid": t.workload.uuid, "status": e.status.value, "log": (e.log or "")[:300],
                     "latency_ms": perf.latency_ms if perf else None,
                     "host_ms": (perf.timing or {}).get("host_ms") if perf else None,
                     "judge_clock": extra.get("judge_clock")})  # fmt: skip
    ROWS[f"example_{problem}_{solution}"] = {"rows": rows, "seconds": round(time.time() - t0, 2)}
    _write_rows()
    assert all(r["status"] == "PASSED" for r in rows), rows


def _load(case: str):
    spec = importlib.util.spec_from_file_location(f"judge_gpu_{case}", CHEATS / case / "kernel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _kernel_median(fn, pool, before_call=None) -> float:
    res = timing.benchmark(fn, pool, method="kernel", reps=30, trials=3, warmup=3, before_call=before_call)
    return res.median_ms


def test_l2_persistence_is_reset_between_timed_calls():
    """In-process: the persisting-window kernel timed with and without the judge's reset, and its twin."""
    attack, twin_mod = _load("gpu_l2_persist"), _load("gpu_l2_twin")
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = [(torch.randn(2048, 1024, device="cuda", generator=gen), torch.randn(1024, device="cuda", generator=gen))
            for _ in range(3)]  # fmt: skip
    l2 = timed.PersistingL2()
    twin_ms = _kernel_median(twin_mod.run, pool, lambda k: l2.clear())
    open_ms = _kernel_median(attack.run, pool)
    reset_ms = _kernel_median(attack.run, pool, lambda k: l2.clear())
    l2.clear()
    ROWS["l2_in_process"] = {"twin_ms": twin_ms, "attack_without_reset_ms": open_ms, "attack_with_reset_ms": reset_ms,
                             "driver_return_codes": dict(attack.last_rc), "reset": l2.record(),
                             "limit_after": l2.limit()}  # fmt: skip
    _write_rows()
    assert attack.last_rc.get("window") == 0 and attack.last_rc.get("limit") == 0, attack.last_rc
    assert l2.error is None and l2.found_set, l2.record()  # the attack set the set-aside; a later reset saw it
    assert reset_ms >= NO_GAIN * twin_ms


def _trace_summary(call, reps: int = 10) -> dict:
    """What the profiler records while another thread launches: events by category, launch threads, foreign µs."""
    import tempfile
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile, record_function

    from solkit.timing.kernel import foreign_gpu_us

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for r in range(reps):
            with record_function(f"{timing.RANGE_PREFIX}{r}"):
                call()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        trace = json.loads(Path(f.name).read_text())
    events = trace.get("traceEvents", [])
    launch_events = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    launches = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in (e.get("args") or {})}  # fmt: skip
    kernels = [e for e in events if e.get("cat") == "kernel"]
    return {
        "categories": dict(Counter(e.get("cat", "") for e in events)),
        "range_tids": sorted({str(e.get("tid")) for e in events if e.get("cat") == "user_annotation"}),
        "launch_tids": dict(Counter(str(e.get("tid")) for e in launch_events)),
        "kernels": len(kernels),
        "kernels_without_launch": sum(1 for e in kernels if (e.get("args") or {}).get("correlation") not in launches),
        "kernel_names": dict(Counter(e.get("name", "")[:40] for e in kernels).most_common(6)),
        "foreign_us": foreign_gpu_us(trace),
    }


def test_work_of_another_thread_between_calls_is_charged_to_the_calls():
    """In-process: a call that spins ~10 µs while a thread keeps launching GPU work, between the calls too."""
    a = torch.randn(1024, 1024, device="cuda")
    stop, launched = threading.Event(), [0]

    def worker():
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            while not stop.is_set():
                a @ a
                launched[0] += 1
                s.synchronize()

    x = torch.zeros(16, device="cuda")

    def call():
        torch.cuda._sleep(20_000)
        x.add_(1)

    quiet = timing.benchmark(call, None, method="kernel", reps=50, trials=2, warmup=2)
    t = threading.Thread(target=worker, daemon=True)
    t.start()
    try:
        while launched[0] < 5:
            time.sleep(0.001)
        busy = timing.benchmark(call, None, method="kernel", reps=50, trials=2, warmup=2)
        diag = _trace_summary(call)
    finally:
        stop.set()
        t.join()
    ROWS["foreign_in_process"] = {"quiet_median_ms": quiet.median_ms, "quiet_foreign_ms": quiet.foreign_ms,
                                  "busy_median_ms": busy.median_ms, "busy_foreign_ms": busy.foreign_ms,
                                  "worker_launches": launched[0], "trace_with_worker": diag}  # fmt: skip
    _write_rows()
    assert quiet.foreign_ms == 0.0
    assert busy.foreign_ms > 0.0 and busy.median_ms > quiet.median_ms + 0.5 * busy.foreign_ms
