"""The judge's processes start at the same time: the fork server during the command's own start-up, the candidate
while the reference runs; and the command leaves as soon as its output is written (docs/sol-execbench.md)."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from solkit.harness.phases import WORKLOAD_PHASES
from solkit.harness.spawn import device_guess

EXAMPLE = Path(__file__).parent / "examples" / "gelu_add"
FAST = ["--cpu-threads", "1", "--cpu-timing-budget", "0.2", "--timing-trials", "1", "--reps", "3", "--warmup", "1"]


@pytest.mark.parametrize(("device", "guess"), [("cpu", "cpu"), ("cuda", "cuda:0"), ("cuda:1", "cuda:1")])
def test_the_candidates_device_before_torch(device, guess):
    assert device_guess(device) == guess
    assert device_guess("auto") in ("cpu", "cuda:0")


def _busy(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of the intervals."""
    total, end = 0.0, -float("inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def test_eval_start_ups_overlap_and_the_command_leaves_at_once(tmp_path):
    out = tmp_path / "traces.jsonl"
    argv = [sys.executable, "-m", "solkit", "eval", str(EXAMPLE), "--solution", str(EXAMPLE / "solution_pytorch.json"),
            "-o", str(out), "--json", "--device", "cpu", *FAST]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    traces = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(traces) == 2  # a 2-workload problem
    phases = traces[0]["evaluation"]["solkit"]["phases_s"]
    line, launch = phases["timeline"], phases["run"]["launch"]
    # the fork server was spawned during the command's own start-up, before the evaluation started; the candidate
    # process right after the problem was read, before the judge imported torch and asked for the reference
    assert -launch < line["forkserver.spawn"] < 0 < line["forkserver.ready"] + launch
    assert line["candidate.spawn"] < phases["run"]["load"] + 0.5 < line["judge.ready"] <= line["reference.start"]
    assert line["candidate.spawn"] < line["reference.done"] <= line["judge.between"] < line["candidate.done"]
    spans = [(-launch, 0.0), (line["forkserver.spawn"], line["forkserver.ready"]), (0.0, line["judge.ready"]),
             (line["reference.start"], line["reference.done"]), (line["candidate.spawn"], line["candidate.ready"]),
             (line["candidate.ready"], line["judged"])]  # fmt: skip
    busy = sum(b - a for a, b in spans)
    assert busy > _busy(spans) + 0.5  # they overlap: the sum of the phases exceeds the time they cover
    # the one-off phases and every workload's own add up to the critical path (nothing left uncounted; a workload
    # the judge failed midway records only its reference phase) ...
    own = WORKLOAD_PHASES
    per = [t["evaluation"]["solkit"]["phases_s"] for t in traces]
    counted = sum(phases["run"].values()) + sum(p.get(k) or 0.0 for p in per for k in own)
    critical = launch + line["judged"]
    assert counted < critical + 0.2
    if all(t["evaluation"]["status"] == "PASSED" for t in traces):
        assert counted == pytest.approx(critical, rel=0.2)
    # ... and nothing but writing the traces comes after the last verdict: no interpreter teardown of torch
    assert wall - critical < 1.0, (wall, critical)


def test_sol_analysis_runs_while_the_reference_does(monkeypatch):
    from harness_helpers import fast_options

    import solkit.harness.evaluate as ev

    seen = []

    def sol_for(problem, workload, env, basis):  # stands in for the analysis: where and when it ran
        seen.append((threading.current_thread().name, time.time(), env.get("hardware")))
        return None, "SOL skipped: test"

    monkeypatch.setattr(ev, "sol_for", sol_for)
    traces = ev.evaluate(EXAMPLE, EXAMPLE / "solution_pytorch.json", fast_options(max_workloads=2, device="cpu"))
    # in the thread started when the reference process said what it runs on (beside it, not after the run), with
    # that process's environment; joined before the candidate's first call
    assert len(seen) == 2 and {name for name, _, _ in seen} == {"solkit-sol"}
    assert all(hw for _, _, hw in seen)
    line = traces[0].evaluation.solkit["phases_s"]["timeline"]
    assert line["reference.start"] < line["judge.between"] < line["candidate.done"]


@pytest.fixture
def fresh_server(monkeypatch):
    """ForkServer's process-wide state, set aside for the test and given back after it."""
    from solkit.harness.forkserver import ForkServer

    monkeypatch.setattr(ForkServer, "_instance", None)
    monkeypatch.setattr(ForkServer, "_broken", False)
    yield ForkServer
    if ForkServer.current() is not None:
        ForkServer.current().close()


def test_gpu_preload_serves_unless_it_loaded_the_driver(fresh_server, tmp_path, monkeypatch):
    from solkit.harness.forkserver import GPU_PRELOAD

    fresh_server.prestart("cuda:0")  # torch._dynamo imported ahead: the driver stays unloaded, so it serves
    first = fresh_server.current()
    assert first.preload == GPU_PRELOAD and fresh_server.get("cuda:0") is first
    first.close()
    # a preload that loads a library named like the driver: refused, and a server without the preload serves
    lib = next(
        p for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1") if Path(p).exists()
    )
    (tmp_path / "libcuda.so.1").write_bytes(Path(lib).read_bytes())
    (tmp_path / "loads_driver.py").write_text(f"import ctypes\nctypes.CDLL({str(tmp_path / 'libcuda.so.1')!r})\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setattr("solkit.harness.forkserver.GPU_PRELOAD", ("loads_driver",))
    monkeypatch.setattr(fresh_server, "_instance", None)
    server = fresh_server.get("cuda:0")
    assert server is not None and server.preload == () and server is fresh_server.current()
