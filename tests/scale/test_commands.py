"""bench and eval-suite serially, on --devices cpu,cpu (one worker killed mid-run) and on a Ray local cluster:
the same rows and traces with the same statuses, in the same order and form, each carrying its device.

One Ray start for every Ray test (tests/scale/conftest.py); tiny work everywhere else.
"""

import json
import shutil

import pytest
from harness_helpers import EXAMPLES

from solkit.cli import main

BENCH = ["bench", "--ops", "rmsnorm", "--size", "s", "--reps", "2", "--backends", "eager",
         "--calibration", "quick", "--json"]  # fmt: skip
EVAL = ["--json", "--max-workloads", "1", "--reps", "3", "--warmup", "1", "--cpu-threads", "1",
        "--cpu-timing-budget", "0.2", "--no-precision-check"]  # fmt: skip


def _bench(tmp, name, *extra):
    out = tmp / name
    assert main([*BENCH, "--out", str(out), *extra]) == 0
    results = json.loads((out / "results.json").read_text())
    return results["rows"], results["meta"]


def _row_keys(rows):
    return [(r["problem"], r["workload"], r["backend"], r["status"]) for r in rows]


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    # One evaluation and one broken problem: each worker gets an item; every evaluation starts its own processes.
    shutil.copytree(EXAMPLES / "gather_rows", root / "L1" / "gather_rows")
    (root / "L2" / "broken").mkdir(parents=True)
    (root / "L2" / "broken" / "definition.json").write_text("{not json")
    return root


def _eval_suite(suite, out, *extra):
    rc = main(["eval-suite", str(suite), "-o", str(out), *EVAL, *extra])
    summary = json.loads((out / "summary.json").read_text())
    traces = {}
    for f in sorted(out.glob("*.traces.jsonl")):
        traces[f.name] = [json.loads(line) for line in f.read_text().splitlines()]
    return rc, summary, traces


def _trace_keys(traces):
    return {name: [(t["definition"], t["solution"], t["workload"]["uuid"], t["evaluation"]["status"]) for t in ts]
            for name, ts in traces.items()}  # fmt: skip


@pytest.fixture(scope="module")
def serial(tmp_path_factory, suite):
    tmp = tmp_path_factory.mktemp("serial")
    return _bench(tmp, "bench", "--device", "cpu"), _eval_suite(suite, tmp / "traces", "--device", "cpu")


def _check_bench(serial_rows, serial_meta, rows, meta, mode):
    assert _row_keys(rows) == _row_keys(serial_rows)  # same rows, same order
    assert [sorted(r) for r in rows] == [sorted(r) for r in serial_rows]  # same form
    assert set(meta) == set(serial_meta) and meta["scale"]["mode"] == mode and meta["scale"]["failed_items"] == []
    uuid = serial_meta["devices"][0]["uuid"]
    assert uuid.startswith("CPU-") and all(r["device_uuid"] == uuid and r["device_name"] for r in rows)
    assert all(r["sol_calibrated"] for r in rows if r["status"] == "ok")  # scored against the worker's ceilings
    for m in (serial_meta, meta):  # where the time went: each workload's own seconds and when it came back
        items = m["scale"]["timeline"]["items"]
        assert len(items) == len({(r["problem"], r["workload"]) for r in rows}) and all(i["seconds"] > 0 for i in items)
        assert [i["done_s"] for i in items] == sorted(i["done_s"] for i in items)


def _check_eval(serial_ev, ev):
    (rc0, s0, t0), (rc, s, t) = serial_ev, ev
    assert rc == rc0 == 1  # the broken problem
    assert _trace_keys(t) == _trace_keys(t0) and sum(map(len, t.values())) == 1
    assert list(s["problems"]) == list(s0["problems"])
    for k, entry in s["problems"].items():
        assert entry.get("by_status") == s0["problems"][k].get("by_status")
        assert entry.get("errors") == s0["problems"][k].get("errors")
    uuid = next(iter(t0.values()))[0]["evaluation"]["solkit"]["device_uuid"]
    assert uuid.startswith("CPU-")
    assert all(tr["evaluation"]["solkit"]["device_uuid"] == uuid for ts in t.values() for tr in ts)


def test_local_pool_matches_serial_with_a_worker_killed(serial, suite, tmp_path, monkeypatch):
    (rows0, meta0), ev0 = serial
    # cpu#1 is killed (SIGKILL) as its first item arrives: that item alone is retried, on cpu#0.
    monkeypatch.setenv("SOLKIT_SCALE_TEST_KILL", "cpu#1:1")
    rows, meta = _bench(tmp_path, "bench", "--devices", "cpu,cpu")
    _check_bench(rows0, meta0, rows, meta, "local")
    assert [d["worker"] for d in meta["devices"]] == ["cpu#0", "cpu#1"]
    monkeypatch.delenv("SOLKIT_SCALE_TEST_KILL")
    _check_eval(ev0, _eval_suite(suite, tmp_path / "traces", "--devices", "cpu,cpu"))


def test_ray_local_cluster_matches_serial(ray_cluster, serial, suite, tmp_path):
    (rows0, meta0), ev0 = serial
    rows, meta = _bench(tmp_path, "bench", "--ray", "auto")
    _check_bench(rows0, meta0, rows, meta, "ray")
    assert len(meta["devices"]) == 2 and all(d["worker"].startswith("ray:") for d in meta["devices"])
    phases = meta["scale"]["pool"]  # where a Ray run's own time went: connection, actors, first item, idle gaps
    assert phases["connected"] <= phases["actors_asked"] <= phases["first_item_asked"] and len(phases["actors"]) == 2
    _check_eval(ev0, _eval_suite(suite, tmp_path / "traces", "--ray", "auto"))


@pytest.mark.parametrize(
    "argv, words",
    [
        (["bench", "--devices", "cpu,cpu", "--device", "cpu"], "give one"),
        (["bench", "--devices", "cpu:0"], "--devices"),
        (["eval-suite", str(EXAMPLES), "--devices", "1,cpu"], "--devices"),
        (["eval-suite", str(EXAMPLES), "--devices", "cpu", "--device", "cpu"], "give one"),
    ],
)
def test_bad_devices_are_one_line(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_bad_input_after_the_workers_started_leaves_none_behind(capsys):
    import multiprocessing as mp

    # bench starts its workers first (they start up while it imports and selects); an error after that closes them.
    assert main(["bench", "--devices", "cpu,cpu", "--backends", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown backend 'nope'" in err and err.count("\n") == 1
    assert not [p for p in mp.active_children() if p.name.startswith("solkit-cpu#")]


def test_missing_ray_is_one_line(monkeypatch, capsys):
    import builtins

    real = builtins.__import__

    def no_ray(name, *a, **k):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("no ray")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    assert main(["bench", "--ray", "auto"]) == 2
    assert "pip install 'solkit[ray]'" in capsys.readouterr().err


def test_ray_actor_lost_mid_run_costs_only_its_item(ray_cluster):
    import os

    from solkit.scale import Call, Item, open_pool

    # The first item kills its actor's process wherever it runs (a node leaving looks the same to the caller).
    items = [Item(("crash",), Call(os._exit, (3,)))] + [Item((str(i),), Call(abs, (-i,))) for i in range(4)]
    with open_pool(devices="cpu:2", ray="auto") as pool:
        outs = {o.index: o for o in pool.map_unordered(items)}
    assert len(outs) == 5 and all(outs[i].ok and outs[i].value == i - 1 for i in range(1, 5))
    assert not outs[0].ok and outs[0].attempts == 2 and "its worker died" in outs[0].error


def test_model_on_ray_gives_the_serial_report_from_each_actor(ray_cluster, capsys):
    pytest.importorskip("transformers")
    tiny = ["model", "--hf", "llama", "--layers", "1", "--seq", "8", "--batch", "2", "--arch", "h200-sxm",
            "--warmup", "1", "--steps", "1", "--mode", "fwd", "--json", "--top", "100"]  # fmt: skip
    assert main([*tiny, "--device", "cpu"]) == 0
    serial = json.loads(capsys.readouterr().out)
    assert main([*tiny, "--ray", "auto", "--devices", "cpu:2"]) == 0
    pooled = json.loads(capsys.readouterr().out)
    work = [sorted((o["name"], o["calls"], o["flops"], o["bytes"]) for o in d["ops"]) for d in (serial, pooled)]
    assert work[0] == work[1]  # the same operators, calls and work, measured in an actor
    assert pooled["meta"]["scale"] == {"mode": "ray", "workers": 2, "failed_items": []}
    runs = pooled["meta"]["runs"]
    assert len(runs) == 2 and all(r["ok"] and r["worker"].startswith("ray:") for r in runs)
    assert main([*tiny, "--ray", "auto", "--devices", "0,1"]) == 2  # GPU indices name this host's devices
    assert "--ray" in capsys.readouterr().err
