"""solkit model-check on a CPU: every GEMM a model step ran is timed again with the bench's protocol, at exactly its
shapes and operand layouts, and compared (the ratio is computed; on a CPU times are noise, so the 5 % is not asked)."""

from __future__ import annotations

import json

import pytest
import torch

from solkit.bench.model_check import (
    Timer,
    burst_gap_ms,
    compare,
    layout_problem,
    per_clock,
    print_check,
    step_duty,
)
from solkit.cli import main
from solkit.errors import SolkitError
from solkit.model import analyze
from solkit.model.gemms import GEMM_OPS
from solkit.model.html import bench_check_rows, write_model_report
from solkit.sol.ceilings import get_ceilings


class Net(torch.nn.Module):
    """A biased linear (addmm), an unbiased one (mm) and a batched product (bmm), at odd sizes."""

    def __init__(self, d: int, h: int):
        super().__init__()
        self.up = torch.nn.Linear(d, h)
        self.down = torch.nn.Linear(h, d, bias=False)
        self.mix = torch.nn.Parameter(torch.randn(3, h // 3, 5) / h)

    def forward(self, x):
        y = torch.relu(self.up(x))  # [tokens, h]
        z = torch.bmm(y.view(-1, 3, y.shape[1] // 3).transpose(0, 1), self.mix)  # [3, tokens, 5]
        return self.down(y) + z.sum()


@pytest.fixture(scope="module", params=[(torch.float32, 7, 12, 9), (torch.float16, 5, 6, 15)], ids=["fp32", "fp16"])
def run(request, tmp_path_factory):
    dtype, tokens, d, h = request.param
    torch.manual_seed(0)
    model = Net(d, h).to(dtype)
    rep = analyze(model, (torch.randn(tokens, d, dtype=dtype),), mode="fwd_bwd", arch="h200-sxm", warmup=1)
    out = tmp_path_factory.mktemp("model_check")
    write_model_report(rep, out)
    return rep, out, dtype


def test_rows_are_the_models_gemms_exactly(run, capsys):
    rep, out, dtype = run
    assert main(["model-check", str(out), "--reps", "2", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["runs"][0]
    # the model's own GEMM calls, read from its attributed rows (not from results.json's `gemms`)
    calls = {(r.op, r.shapes, r.backward) for r in rep.rows if r.op in GEMM_OPS and r.match}
    rows = got["rows"]
    assert {r["op"] for r in rows} == {"mm", "addmm", "bmm"}
    assert len(rows) == len({(r["name"]) for r in rows}) >= len(calls)
    d = json.loads((out / "results.json").read_text())
    for r, g in zip(rows, d["gemms"], strict=True):
        assert (r["m"], r["k"], r["n"], r["batch"], r["layout"]) == (g["m"], g["k"], g["n"], g["batch"], g["layout"])
        shapes = tuple(tuple(s) for s in ([g["bias_shape"]] if g["bias_shape"] else []) + [g["a_shape"], g["b_shape"]])
        assert (g["op"], shapes, g["backward"]) in calls
        assert r["dtype"] == str(dtype).removeprefix("torch.")
        lay = r["layout_run"]
        assert lay["status"] == "ok", lay["error"]
        assert r["t_sol_agrees"], (r["name"], r["model_t_sol_ms"], lay["t_sol_ms"])
        assert r["layout_ratio"] == pytest.approx(r["model_sol"] / lay["sol_raw"])
        if r["op"] == "bmm":
            assert r["bench"] is None and r["ratio"] is None  # gemm_bf16 is 2-D
        else:
            assert r["bench"]["status"] == "ok" and r["ratio"] == pytest.approx(r["model_sol"] / r["bench"]["sol_raw"])
    layouts = {(r["op"], r["layout"], r["backward"]) for r in rows}
    assert ("addmm", "A @ B^T", False) in layouts  # the forward x @ W.T
    assert ("mm", "A^T @ B", True) in layouts  # a weight gradient: the output gradient transposed
    # the backward starts from the sum of the output: its gradient is one element broadcast (0 strides), and the
    # layout row reads it so (its T_SOL agrees, checked above)
    assert any(0 in r["a_stride"] + r["b_stride"] for r in rows)
    assert d["bench_check"]["summary"]["gemms"] == len(rows)  # written back into results.json and the page
    assert "id='bench-check'" in (out / "report.html").read_text()


@pytest.mark.parametrize("a_t,b_t", [(False, True), (True, False), (False, False), (True, True)])
def test_layout_problem_stores_operands_as_the_model(a_t, b_t):
    g = {"op": "mm", "m": 5, "k": 3, "n": 7, "batch": 1, "a_transposed": a_t, "b_transposed": b_t,
         "layout": "", "dtype": "float32", "bias_shape": None}  # fmt: skip
    p = layout_problem(g)
    a = torch.randn(*([3, 5] if a_t else [5, 3]))
    b = torch.randn(*([7, 3] if b_t else [3, 7]))
    c = p.reference_fn()(a, b)
    assert c.shape == (5, 7)
    torch.testing.assert_close(c, (a.t() if a_t else a) @ (b.t() if b_t else b))


def test_the_bench_row_is_scored_on_the_model_runs_ceilings():
    g = {"op": "mm", "m": 4, "k": 8, "n": 6, "batch": 1, "a_transposed": False, "b_transposed": True,
         "layout": "A @ B^T", "dtype": "float32", "bias_shape": None, "name": "mm", "backward": False,
         "a_stride": [8, 1], "b_stride": [1, 8], "category": "mlp", "calls": 1, "time_ms_per_call": 1.0,
         "t_sol_ms_per_call": 1e-6, "sol_raw": 0.5}  # fmt: skip
    a100 = get_ceilings("a100-sxm4-80gb")
    (row,) = compare([g], Timer("cpu", a100, reps=1), layout=False)["rows"]
    assert row["layout_run"] is None and row["layout_ratio"] is None
    # 4x8 @ 8x6 in fp32 is memory-bound: its bytes (both operands and the output) over the A100's bandwidth
    assert row["bench"]["t_sol_ms"] == pytest.approx((4 * 8 + 8 * 6 + 4 * 6) * 4 / a100.bandwidth * 1e3)
    assert row["ratio"] == pytest.approx(0.5 / row["bench"]["sol_raw"])


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main(["model-check", str(tmp_path)]) == 2
    (tmp_path / "results.json").write_text(json.dumps({"meta": {}, "ceilings": {}}))
    assert main(["model-check", str(tmp_path)]) == 2
    (tmp_path / "results.json").write_text(json.dumps({"meta": {"device": {"kind": "cuda"}}, "ceilings": {},
                                                       "gemms": []}))  # fmt: skip
    assert main(["model-check", str(tmp_path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "no results.json" in err and "no `gemms`" in err and "where the model ran" in err
    assert "Traceback" not in err


@pytest.mark.gpu
def test_a_bf16_step_on_the_gpu_agrees_on_t_sol(tmp_path, capsys):
    torch.manual_seed(0)
    model = Net(256, 384).cuda().to(torch.bfloat16)
    x = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    write_model_report(analyze(model, (x,), mode="fwd_bwd", warmup=2), tmp_path)
    assert main(["model-check", str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["runs"][0]["rows"]
    assert rows and all(r["t_sol_agrees"] and r["layout_run"]["status"] == "ok" for r in rows)
    assert all(r["layout_ratio"] > 0 for r in rows)
    # the burst rows idled the GPU before every call for the gap asked, timed as CUPTI kernel spans
    for r in rows:
        t = r["layout_burst"]["timing"]
        assert t["method"] == "cupti_kernel_span" and t["cooldown_ms"] == pytest.approx(r["burst_gap_ms"])
        assert r["burst_gap_ms"] > 0 and r["layout_ratio_burst"] > 0


@pytest.mark.parametrize("model_mhz,bench_mhz,ok", [(1980, 1650, True), (1980, 1980, False), (None, 1650, None)])
def test_the_ratio_at_equal_clocks(model_mhz, bench_mhz, ok):
    # the model's GEMM ran at 1980 MHz and looked 1.2x the bench's SOL; the bench's ran at 1650 MHz
    r, within = per_clock(1.2, model_mhz, {"clock": {"sm_clock_mhz": bench_mhz}}, 0.05)
    assert within is ok
    if ok is not None:
        assert r == pytest.approx(1.2 * bench_mhz / model_mhz)


@pytest.mark.parametrize("call_ms,duty,gap", [(1.0, 0.5, 1.0), (2.0, 0.25, 6.0), (3.0, 1.0, 0.0), (0.09, 0.6, 0.06)])
def test_the_burst_gap_gives_the_steps_duty_cycle(call_ms, duty, gap):
    g = burst_gap_ms(call_ms, duty)
    assert g == pytest.approx(gap)
    assert call_ms / (call_ms + g) == pytest.approx(duty) if call_ms else g == 0


@pytest.mark.parametrize("duty", [0.0, -0.2, 1.5])
def test_a_duty_out_of_range_is_one_line(duty, tmp_path, capsys):
    with pytest.raises(SolkitError):
        burst_gap_ms(1.0, duty)
    (tmp_path / "results.json").write_text("{}")
    assert main(["model-check", str(tmp_path), "--duty", str(duty)]) == 2
    assert "--duty" in capsys.readouterr().err


@pytest.mark.parametrize("gemm_ms,wall_ms,duty", [([30.0, 20.0], 100.0, 0.5), ([5.0], 4.0, 1.0), ([], 10.0, None)])
def test_the_steps_gemm_duty(gemm_ms, wall_ms, duty):
    d = {"summary": {"wall_ms": wall_ms}, "gemms": [{"time_ms": t} for t in gemm_ms]}
    assert step_duty(d) == (pytest.approx(duty) if duty is not None else None)


class _Recorder:
    """A timer that records the idle gap each row was asked for, and answers an SOL that depends on it."""

    def __init__(self):
        self.gaps: list[tuple[str, float]] = []

    def bench(self, g, gap_ms=0.0):
        self.gaps.append(("bench", gap_ms))
        return {"sol_raw": 0.8 if gap_ms else 0.7, "t_sol_ms": g["t_sol_ms_per_call"]}

    def layout(self, g, gap_ms=0.0):
        self.gaps.append(("layout", gap_ms))
        return {"sol_raw": 0.8 if gap_ms else 0.7, "t_sol_ms": g["t_sol_ms_per_call"]}


@pytest.mark.parametrize("timings", [("sustained",), ("burst",), ("sustained", "burst")])
def test_sustained_and_burst_rows_are_labelled_and_the_goal_is_judged_on_burst(timings):
    g = {"op": "mm", "m": 4, "k": 8, "n": 6, "batch": 1, "a_transposed": False, "b_transposed": False,
         "layout": "A @ B", "dtype": "float32", "bias_shape": None, "name": "mm", "backward": True,
         "a_stride": [8, 1], "b_stride": [6, 1], "category": "mlp", "calls": 2, "time_ms_per_call": 3.0,
         "t_sol_ms_per_call": 2.4, "sol_raw": 0.8}  # fmt: skip
    timer = _Recorder()
    out = compare([g], timer, 0.05, True, timings, duty=0.6)
    (row,) = out["rows"]
    want = [("bench", 0.0), ("layout", 0.0)] if "sustained" in timings else []
    want += [("bench", 2.0), ("layout", 2.0)] if "burst" in timings else []  # 3 ms x (1 - 0.6) / 0.6
    assert [(w, pytest.approx(x)) for w, x in timer.gaps] == want
    s = out["summary"]
    assert s["judged_on"] == ("burst" if "burst" in timings else "sustained")
    if "burst" in timings:
        assert row["burst_gap_ms"] == pytest.approx(2.0) and row["within_burst"] is True
        assert s["bench_burst"]["within"] == s["layout_burst"]["within"] == 1
    if "sustained" in timings:
        assert row["ratio"] == pytest.approx(0.8 / 0.7) and row["within"] is False
    else:
        assert row["bench"] is None and s["bench"]["compared"] == 0


def test_the_gap_reaches_the_timing_protocol(monkeypatch):
    import solkit.bench.runner as runner

    seen = []
    real = runner.benchmark

    def spy(*a, **kw):
        seen.append(kw.get("cooldown_ms"))
        return real(*a, **kw)

    monkeypatch.setattr(runner, "benchmark", spy)
    g = {"op": "mm", "m": 3, "k": 5, "n": 4, "batch": 1, "dtype": "float32"}
    Timer("cpu", get_ceilings("h200-sxm"), reps=1).bench(g, 1.25)
    assert seen == [1.25]


class _Clocked:
    """A timer whose rows ran at given SM clocks: sustained at the power cap, burst at the boost clock."""

    def __init__(self, sol_sustained, sol_burst, mhz_sustained=1485.0, mhz_burst=1980.0):
        self.rows = {False: (sol_sustained, mhz_sustained), True: (sol_burst, mhz_burst)}

    def bench(self, g, gap_ms=0.0):
        sol, mhz = self.rows[gap_ms > 0]
        return {"sol_raw": sol, "t_sol_ms": g["t_sol_ms_per_call"], "clock": {"sm_clock_mhz": mhz}}

    layout = bench


def _gemm(clock, bound="compute", **kw):
    return {"op": "mm", "m": 8192, "k": 4096, "n": 4096, "batch": 1, "a_transposed": False, "b_transposed": False,
            "layout": "A @ B", "dtype": "bfloat16", "bias_shape": None, "name": "mm (bwd)", "backward": True,
            "a_stride": [4096, 1], "b_stride": [4096, 1], "category": "attention", "calls": 8,
            "time_ms_per_call": 0.364, "t_sol_ms_per_call": 0.278, "sol_raw": 0.764, "clock": clock, "bound": bound,
            **kw}  # fmt: skip


@pytest.mark.parametrize("nearest", [False, True])
def test_a_burst_row_outside_at_face_value_and_within_at_equal_clocks(nearest, capsys):
    # the step's GEMM ran at 1830 MHz; the burst bench row at 1980 MHz got SOL 0.808 (ratio 0.946: outside 5 %);
    # at equal clocks 0.946 x 1980 / 1830 = 1.023: within
    clock = {"sm_clock_mhz": 1830.0, "samples": 1, "nearest": nearest, **({"nearest_ms": 0.4} if nearest else {})}
    out = compare([_gemm(clock)], _Clocked(0.72, 0.808), 0.05, True, ("sustained", "burst"), duty=0.5)
    (row,) = out["rows"]
    assert row["ratio_burst"] == pytest.approx(0.764 / 0.808) and row["within_burst"] is False
    assert row["ratio_burst_per_clock"] == pytest.approx(0.764 / 0.808 * 1980 / 1830)
    assert row["within_burst_per_clock"] is True and row["layout_within_burst_per_clock"] is True
    # the sustained per-clock ratio uses the sustained row's own clock (1485 MHz), not the burst's
    assert row["ratio_per_clock"] == pytest.approx(0.764 / 0.72 * 1485 / 1830)
    s = out["summary"]
    assert s["judged_on"] == "burst" and s["bench_burst"]["within"] == 0  # the verdict stays at face value
    assert s["bench_burst_per_clock"] == {"within": 1, "compared": 1, "all_within": True, "worst": "mm (bwd)",
                                          "worst_ratio": pytest.approx(row["ratio_burst_per_clock"]),
                                          "clock_estimated": int(nearest)}  # fmt: skip
    assert s["layout_burst_per_clock"]["within"] == 1
    print_check({"model": "m", "tolerance": 0.05, **out})
    text = " ".join(capsys.readouterr().out.split())
    assert "burst (step-matched, duty 0.50): gemm_bf16 0/1" in text
    assert "burst at equal SM clocks: gemm_bf16 1/1, the model's layout 1/1" in text
    assert ("1 step clock(s) from the nearest sample" in text) is nearest
    cols, rows = bench_check_rows({"rows": out["rows"]})  # the report's table: the per-clock column, "~" marked
    (cells,) = rows
    assert cells[cols.index("burst at equal clocks")].endswith("yes")
    assert cells[cols.index("MHz model / sustained / burst")].startswith("~" if nearest else "1830")


@pytest.mark.parametrize("clock,bound", [(None, "compute"), ({"sm_clock_mhz": 1830.0}, "memory")])
def test_no_burst_ratio_at_equal_clocks_without_a_step_clock_or_for_a_memory_bound_call(clock, bound):
    out = compare([_gemm(clock, bound)], _Clocked(0.72, 0.808), 0.05, True, ("burst",), duty=0.5)
    (row,) = out["rows"]
    assert row["ratio_burst"] is not None and row["ratio_burst_per_clock"] is None
    assert row["within_burst_per_clock"] is None and out["summary"]["bench_burst_per_clock"]["compared"] == 0
