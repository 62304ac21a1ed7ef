import threading
import time

import pytest
import torch

from solkit.harness import anticheat as ac


def test_identity_guard_sees_replaced_functions_and_code():
    guard = ac.IdentityGuard()
    assert len(guard) > 1000 and guard.changed() == []
    original = torch.cuda.synchronize
    try:
        torch.cuda.synchronize = lambda *a, **k: None
        assert "torch.cuda.synchronize" in guard.changed()
    finally:
        torch.cuda.synchronize = original
    assert guard.changed() == []


def test_identity_guard_covers_extra_modules_code_objects():
    import solkit.harness.correctness as cc

    guard = ac.IdentityGuard(extra_modules=(cc,))
    fn = cc.is_constant
    code = fn.__code__
    try:
        fn.__code__ = (lambda x: False).__code__
        assert any(label.endswith("is_constant") for label in guard.changed())
    finally:
        fn.__code__ = code
    assert ac.monkey_patch_reason(guard, "x") is None


def test_output_objects_lazy_and_aliases():
    x = torch.randn(8, 4)

    class Lazy(torch.Tensor):
        pass

    assert "lazy output" in ac.output_objects({"y": x.as_subclass(Lazy)}, {"x": x}, False)
    assert "shares memory" in ac.output_objects({"y": x[2:]}, {"x": x}, False)
    assert ac.output_objects({"y": x[2:]}, {"x": x}, reference_aliases=True) is None
    assert ac.output_objects({"y": x.clone(), "s": 3.0}, {"x": x}, False) is None


def test_readiness_catches_deferred_writes_on_cpu():
    y = torch.zeros(1000)

    def late():
        time.sleep(0.005)
        y.fill_(1.0)

    threading.Thread(target=late).start()
    assert "changed after the call returned" in ac.readiness({"y": y}, torch.device("cpu"))
    assert ac.readiness({"y": torch.ones(5)}, torch.device("cpu")) is None


def test_thread_watch_only_flags_candidate_threads(tmp_path):
    stop = threading.Event()
    watch = ac.ThreadWatch(tmp_path)
    t = threading.Thread(target=stop.wait, daemon=True)  # target defined outside the candidate dir
    t.start()
    assert watch.reason() is None
    assert ac.ThreadWatch(None).candidate_threads() == []
    stop.set()
    t.join()


def test_precision_check_flags_bf16_under_fp32_but_not_reordering():
    x = torch.randn(64, 512, dtype=torch.float64)
    w = torch.randn(512, 128, dtype=torch.float64)
    ref64 = x @ w
    ref = x.float() @ w.float()
    reordered = sum(x[:, i : i + 64].float() @ w[i : i + 64].float() for i in range(0, 512, 64))
    bf16 = (x.bfloat16() @ w.bfloat16()).float()
    ok = ac.precision(ref, ref64, reordered, torch.float32)
    bad = ac.precision(ref, ref64, bf16, torch.float32)
    assert not ok["downgraded"] and bad["downgraded"]
    assert bad["candidate_error"] > bad["limit"] > ok["candidate_error"]
    assert ac.precision(ref, ref64, ref, torch.int32) is None


def test_hidden_work_helpers():
    assert ac.hidden_work(lambda: None, torch.device("cpu")) == {"checked": False}
    info = {"checked": True, "hidden_ms": 0.9, "wall_sync_ms": 1.0, "events_ms": 0.01}
    assert "invisible to events" in ac.hidden_work_reason(info)
    assert ac.hidden_work_reason({**info, "hidden_ms": 0.02}) is None
    assert (
        ac.upcast_inputs({"a": torch.ones(2, dtype=torch.bfloat16), "i": torch.ones(2, dtype=torch.int64), "s": 1.0})[
            "a"
        ].dtype
        == torch.float64
    )


@pytest.mark.gpu
def test_hidden_work_sees_side_stream():
    dev = torch.device("cuda")
    s = torch.cuda.Stream()

    def cheat():
        with torch.cuda.stream(s):
            torch.cuda._sleep(2_000_000)

    info = ac.hidden_work(cheat, dev)
    assert ac.hidden_work_reason(info) is not None
    a = torch.randn(2048, 2048, device=dev)
    assert ac.hidden_work_reason(ac.hidden_work(lambda: a @ a, dev)) is None


def test_gpu_work_of_other_threads_between_calls_is_foreign():
    """foreign_gpu_us: GPU work launched outside the call ranges by a thread that ran none (or with no launch
    record) is counted; the timing thread's own flush between the ranges, and any launch inside a range, is not."""
    from solkit.timing import RANGE_PREFIX
    from solkit.timing.kernel import foreign_gpu_us

    ev = [
        {"cat": "user_annotation", "name": f"{RANGE_PREFIX}0", "ts": 100.0, "dur": 20.0, "tid": 1},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 105.0, "args": {"correlation": 1}, "tid": 1},
        {"cat": "kernel", "name": "own", "ts": 200.0, "dur": 40.0, "args": {"correlation": 1}},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 110.0, "args": {"correlation": 2}, "tid": 7},
        {"cat": "kernel", "name": "other_thread_in_range", "ts": 210.0, "dur": 9.0, "args": {"correlation": 2}},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 130.0, "args": {"correlation": 3}, "tid": 1},
        {"cat": "kernel", "name": "flush", "ts": 250.0, "dur": 25.0, "args": {"correlation": 3}},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 131.0, "args": {"correlation": 4}, "tid": 7},
        {"cat": "kernel", "name": "ahead", "ts": 280.0, "dur": 30.0, "args": {"correlation": 4}},
        {"cat": "kernel", "name": "no_launch_record", "ts": 320.0, "dur": 5.0, "args": {"correlation": 99}},
        {"cat": "kernel", "name": "queued_before_profiling", "ts": 50.0, "dur": 8.0, "args": {"correlation": 98}},
    ]
    assert foreign_gpu_us({"traceEvents": ev}) == 35.0
    assert foreign_gpu_us({"traceEvents": ev[:7]}) == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_timed_inputs_are_new_values_every_call_and_restored(dtype):
    """InputRefresh (between timed calls on a GPU): no call of a slot sees values an earlier call saw; integer
    inputs are left alone; restore() gives back the original values, which the judge's check needs."""
    from solkit.harness.timed import InputRefresh

    x, idx = torch.randn(5, 7).to(dtype), torch.arange(3)
    pool = [(x.clone(), idx.clone()), (x.clone() * 2, idx.clone())]
    refresh = InputRefresh(pool)
    seen = [x.clone()]
    for k in range(0, 158, 2):  # 79 calls of slot 0
        refresh(k)
        assert not any(torch.equal(pool[0][0], s) for s in seen)
        seen.append(pool[0][0].clone())
        assert torch.equal(pool[0][1], idx)
    refresh(158)
    assert refresh.record()["repeated_factors"] == 1  # the 80th call of a slot reuses a factor, and says so
    refresh.restore()
    assert torch.equal(pool[0][0], x) and torch.equal(pool[1][0], x * 2)


def _round(per_call, wait_frac=0.0, cpu_per_call=None, calls=100):
    wall = per_call * calls
    unwaited = per_call * (1 - wait_frac)
    return {"calls": calls, "wall_ms": wall, "per_call_ms": per_call, "wait_ms": wait_frac * wall,
            "unwaited_per_call_ms": unwaited, "cpu_per_call_ms": cpu_per_call or per_call}  # fmt: skip


@pytest.mark.parametrize(
    "rounds,plausible",
    [
        ([_round(0.05), _round(0.5)], True),  # quiet: the fastest round fits
        ([_round(0.5), _round(0.6)], False),  # quiet and too slow: a forged timer
        ([_round(0.5, wait_frac=0.85, cpu_per_call=0.06)], True),  # loaded: the waits stretched it, its CPU time fits
        ([_round(0.5, wait_frac=0.85, cpu_per_call=0.5)], False),  # loaded, but its own CPU time says the work is real
        ([_round(0.5, wait_frac=0.1, cpu_per_call=0.06)], False),  # not loaded enough to set the wall clock aside
        ([_round(0.5, wait_frac=0.3, cpu_per_call=0.06)], False),  # loaded, but the unwaited time does not fit
    ],
)
def test_back_to_back_verdict_sets_the_wall_clock_aside_only_on_a_loaded_cpu(rounds, plausible):
    ok, record = ac.back_to_back_verdict(rounds, limit_ms=0.1)
    assert ok is plausible
    assert ("loaded_machine" in record) is (plausible and rounds[0]["per_call_ms"] > 0.1)


def _fresh(call_ms: float, sets: int = 3, rtt: float = 0.2, staging: float = 0.0) -> dict:
    return {"fresh_call_ms": call_ms, "sets": sets, "round_trip_ms": rtt, "staging_ms": staging}


@pytest.mark.parametrize(
    "fresh,claimed,low,high",
    [
        # a large GEMM on a GPU whose staging copies ran slower than the subtracted floor (fresh calls inflated by
        # 41 ms): the round still holds enough real calls that the unsubtracted staging is a small part of each
        (_fresh(13.76, staging=185.0), 0.88, 15, 25),
        # a launch-bound 21 us kernel: hundreds of calls, so one delay of the request is spread thin
        (_fresh(0.3), 0.021, 150, 2000),
        # a claim far below the real time (a forged timer): the round's cost stays bounded by the fresh calls
        (_fresh(100.0, sets=1), 0.001, 1, 3),
    ],
)
def test_repeat_count_covers_what_is_subtracted_and_bounds_a_forged_claim(fresh, claimed, low, high):
    from solkit.harness.judge import REPEAT_MAX_ROUND_MS, repeat_count

    n = repeat_count(fresh, claimed)
    assert low <= n <= high
    real_round_ms = n * fresh["sets"] * fresh["fresh_call_ms"]
    if fresh["staging_ms"]:  # the round's own work outweighs the staging subtracted from it
        assert n * fresh["sets"] * claimed > 0.2 * fresh["staging_ms"]
    if claimed * 100 < fresh["fresh_call_ms"]:
        assert real_round_ms <= max(REPEAT_MAX_ROUND_MS, fresh["fresh_call_ms"] * fresh["sets"]) * 2
