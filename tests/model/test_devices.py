"""solkit model --devices: the step on each device at once. cpu,cpu gives the serial run's report (same operators,
work and T_SOL, same keys) with both runs listed; two cards give the card-to-card spread; bad lists are one line."""

from __future__ import annotations

import copy
import json

import pytest

pytest.importorskip("transformers")

from solkit.cli import main  # noqa: E402
from solkit.model.devices import add_scale_meta  # noqa: E402
from solkit.scale import Outcome  # noqa: E402

TINY = ["model", "--hf", "llama", "--layers", "1", "--seq", "8", "--batch", "2", "--arch", "h200-sxm", "--warmup",
        "1", "--mode", "fwd", "--json", "--top", "100"]  # fmt: skip


def _run(capsys, *extra):
    assert main([*TINY, *extra]) == 0
    return json.loads(capsys.readouterr().out)


def _work(d):
    return sorted((o["name"], o["calls"], o["category"], o["flops"], o["bytes"], round(o["t_sol_ms"] or 0, 9))
                  for o in d["ops"])  # fmt: skip


@pytest.fixture(scope="module")
def serial_report():
    from solkit.model.analyze import analyze
    from solkit.zoo import build

    built = build("llama", layers=1, seq=8, batch=2, device="cpu", preset="tiny")
    return analyze(built.model, built, mode="fwd", warmup=1, arch="h200-sxm")


def test_cpu_cpu_gives_the_serial_report(capsys):
    serial = _run(capsys, "--device", "cpu")
    pooled = _run(capsys, "--devices", "cpu,cpu")
    assert pooled.keys() == serial.keys() and pooled["meta"].keys() == serial["meta"].keys()
    assert pooled["summary"].keys() == serial["summary"].keys()
    assert _work(pooled) == _work(serial)  # the same operators, calls, work and T_SOL
    assert pooled["summary"]["t_sol_ms"] == pytest.approx(serial["summary"]["t_sol_ms"], rel=1e-9)
    assert serial["meta"]["scale"] == {"mode": "serial", "workers": 1, "failed_items": []}
    assert pooled["meta"]["scale"] == {"mode": "local", "workers": 2, "failed_items": []}
    runs = pooled["meta"]["runs"]
    assert [r["worker"] for r in runs] == ["cpu#0", "cpu#1"] and all(r["ok"] for r in runs)
    uuid = serial["meta"]["devices"][0]["uuid"]
    assert uuid.startswith("CPU-") and {r["device_uuid"] for r in runs} == {uuid}
    assert pooled["meta"]["devices"] == [{"uuid": uuid, "name": runs[0]["device_name"], "runs": 2}]
    assert pooled["summary"]["measured_ms"] == pytest.approx(runs[0]["measured_ms"])  # the report is the first run's
    assert pooled["meta"]["card_spread"] == {"step": [], "ops": []}  # one card: nothing to spread


@pytest.mark.gpu
def test_devices_0_pins_the_step_to_gpu_0(capsys):
    serial = _run(capsys, "--device", "cuda", "--dtype", "fp16")
    pooled = _run(capsys, "--devices", "0", "--dtype", "fp16")
    assert _work(pooled) == _work(serial)
    (run,) = pooled["meta"]["runs"]
    assert run["ok"] and run["worker"] == "cuda:0" and run["device_uuid"].startswith("GPU-")
    assert run["device_uuid"] == serial["meta"]["devices"][0]["uuid"]  # the same card, seen from its worker
    assert pooled["meta"]["device"]["kind"] == "cuda"


def test_two_cards_give_the_spread(serial_report):
    slow = copy.deepcopy(serial_report)
    slow.measured_s *= 1.25
    for g in slow.ops:
        g.time_s *= 1.25
    cards = [{"uuid": "GPU-aaaa", "name": "H200"}, {"uuid": "GPU-bbbb", "name": "H200"}]
    outs = [Outcome(0, ("0",), True, serial_report, device=cards[0], worker="cuda:0"),
            Outcome(1, ("1",), True, slow, device=cards[1], worker="cuda:1"),
            Outcome(2, ("2",), False, error="worker died", device=cards[1], worker="cuda:1", attempts=2)]  # fmt: skip
    meta = add_scale_meta(copy.deepcopy(serial_report), outs, "local", top=3).meta
    assert [d["runs"] for d in meta["devices"]] == [1, 2]
    assert meta["scale"]["failed_items"] == [{"worker": "cuda:1", "error": "worker died"}]
    assert [r["ok"] for r in meta["runs"]] == [True, True, False] and meta["runs"][2]["error"] == "worker died"
    (step,) = meta["card_spread"]["step"]
    assert step["fastest"] == "GPU-aaaa" and step["slowest"] == "GPU-bbbb"
    assert step["ms_spread"] == pytest.approx(0.25)
    ops = meta["card_spread"]["ops"]
    assert len(ops) == 3 and all(o["ms_spread"] == pytest.approx(0.25) for o in ops)
    assert all(set(o["cards"]) == {"GPU-aaaa", "GPU-bbbb"} for o in ops)


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--devices", "gpu7"], "--devices 'gpu7'"),
        (["--devices", "cpu:0"], "--devices 'cpu:0'"),
        (["--devices", "99"], "no CUDA device 99"),
        (["--devices", "cpu,cpu", "--device", "cpu"], "give one"),
    ],
)
def test_bad_devices_are_one_line(extra, words, capsys):
    assert main([*TINY, *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
