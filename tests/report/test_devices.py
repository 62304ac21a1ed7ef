"""Rows by card: times compared only on one card, the card-to-card spread of the same row (CPU, no timing)."""

import json

import pytest

from solkit.cli import main
from solkit.report.crossarch import compare_devices, same_device
from solkit.report.devices import by_device, card_spread, devices_of, same_card
from solkit.report.render import compare, markdown

CARD_A, CARD_B = "GPU-aaaaaaaa-0000", "GPU-bbbbbbbb-1111"


def _row(problem, ms, card, sol_cal, backend="solkit", workload="w1"):
    return {"problem": problem, "size": "l", "model": "llama3-70b", "backend": backend, "workload": workload,
            "status": "ok", "ms": ms, "flops": {"bf16_tensor": 1e12}, "fused_bytes": 1e9, "flops_total": 1e12,
            "sol_spec": 0.8, "sol_calibrated": sol_cal, "bound": "compute", "tier": None, "device_uuid": card,
            "device_name": "NVIDIA H200", "timing": {"trial_medians_ms": [ms] * 3, "cv": 0.001}}  # fmt: skip


def _results(rows):
    return {"meta": {"arch": "h200-sxm", "device": {"name": "NVIDIA H200"}, "ceilings": {}, "timing_policy": "t"},
            "rows": rows}  # fmt: skip


# The numbers: the 70B GEMM at 4.96 ms on one H200 and 5.31 ms on another.
A = _results([_row("gemm_bf16", 4.96, CARD_A, 0.93), _row("rmsnorm", 0.5, CARD_A, 0.9)])
B = _results([_row("gemm_bf16", 5.31, CARD_B, 0.95), _row("rmsnorm", 0.5, CARD_B, 0.9)])


def test_spread_of_the_same_row_across_cards():
    rows = {r["problem"]: r for r in card_spread([A, B])}
    g = rows["gemm_bf16"]
    assert g["fastest"] == CARD_A and g["slowest"] == CARD_B
    assert g["ms_spread"] == pytest.approx(5.31 / 4.96 - 1)
    assert g["sol_spread"] == pytest.approx(0.02)  # each card against its own calibrated ceilings
    assert rows["rmsnorm"]["ms_spread"] == 0.0
    assert card_spread([A]) == []  # one card: nothing to spread


def test_times_are_compared_only_on_one_card():
    assert not same_device([A, B]) and same_device([A, A])
    assert same_card(A["rows"][0], A["rows"][0]) and not same_card(A["rows"][0], B["rows"][0])
    assert compare(A, B) == [] and len(compare(A, A)) == 2
    old = {"problem": "x", "backend": "b"}  # files from before rows named their card still compare
    assert same_card(old, A["rows"][0])
    rows = compare_devices([A, B])
    assert all(r["basis"] == "calibrated" for r in rows)  # one product: each card's own calibrated ceilings


def test_grouping_and_report_section():
    mixed = _results(A["rows"] + B["rows"] + [_row("gemm_bf16", 5.0, CARD_A, 0.9, workload="w2")])
    assert [(d["uuid"], d["rows"]) for d in devices_of(mixed["rows"])] == [(CARD_A, 3), (CARD_B, 2)]
    assert list(by_device(mixed["rows"])) == [CARD_A, CARD_B]
    md = markdown(mixed)
    assert "## Devices" in md and "Card-to-card spread" in md and "7.1%" in md
    assert "## Devices" not in markdown(A)


def test_report_cli_shows_the_spread(tmp_path, capsys):
    fa, fb = tmp_path / "a.json", tmp_path / "b.json"
    fa.write_text(json.dumps(A))
    fb.write_text(json.dumps(B))
    assert main(["report", str(fa), str(fb), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {r["problem"] for r in d["card_spread"]} == {"gemm_bf16", "rmsnorm"}
    assert main(["report", str(fa), str(fb)]) == 0
    out = capsys.readouterr().out
    assert "card-to-card spread" in out and "7.1%" in out


def test_terminal_table_per_card(capsys):
    from solkit.bench.cli import print_table

    print_table(_results(A["rows"] + B["rows"]))
    out = capsys.readouterr().out
    assert "on NVIDIA H200 [GPU-aaaaaaaa]" in out and "on NVIDIA H200 [GPU-bbbbbbbb]" in out
    print_table(A)
    assert "on NVIDIA H200 (h200-sxm)" in capsys.readouterr().out
