"""The local pool on CPU workers: work stealing, identities, a killed worker, a broken setup, --devices."""

import os
import time

import pytest

from solkit.errors import SolkitError
from solkit.scale import Call, Item, open_pool, pack, parse_devices, run_all, unpacked, worker_state
from solkit.scale.dispatch import Dispatch
from solkit.scale.work import Bundle


@pytest.mark.parametrize(
    "spec, n",
    [("cpu,cpu", 2), ("cpu:3", 3), ("CPU:1", 1), (" cpu ", 1)],
)
def test_parse_cpu_devices(spec, n):
    slots = parse_devices(spec)
    assert [s.label for s in slots] == [f"cpu#{i}" for i in range(n)]
    assert all(s.device == "cpu" and s.env() == {"CUDA_VISIBLE_DEVICES": ""} for s in slots)


@pytest.mark.parametrize("spec", ["", "cpu:0", "cpu:x", "0,cpu", "tpu", "0,0", "7"])
def test_parse_bad_devices_is_one_line(spec, monkeypatch):
    monkeypatch.setattr("solkit.scale.devices._cuda_count", lambda: 2)
    with pytest.raises(SolkitError) as e:
        parse_devices(spec)
    assert "--devices" in str(e.value) and "\n" not in str(e.value)


def test_parse_gpu_indices(monkeypatch):
    monkeypatch.setattr("solkit.scale.devices._cuda_count", lambda: 4)
    slots = parse_devices("0,1,3")
    assert [s.env()["CUDA_VISIBLE_DEVICES"] for s in slots] == ["0", "1", "3"]
    assert all(s.device == "cuda:0" for s in slots)  # pinned: each worker sees its one GPU as device 0
    assert len(parse_devices("all")) == 4
    monkeypatch.setattr("solkit.scale.devices._cuda_count", lambda: 0)
    with pytest.raises(SolkitError, match="no CUDA device"):
        parse_devices("all")


def test_dispatch_retries_once_elsewhere_then_fails():
    d = Dispatch([Item(("a",), Call(len, ("x",))), Item(("b",), Call(len, ("y",)))])
    first = d.take("w0", others_alive=True)
    assert first == 0 and d.lost(0, "w0", "killed") is None
    assert d.take("w0", others_alive=True) == 1  # item 0 avoids w0 while another worker lives
    assert d.take("w1", others_alive=True) == 0
    out = d.lost(0, "w1", "killed again")
    assert out is not None and not out.ok and out.attempts == 2 and "killed again" in out.error


@pytest.fixture(scope="module")
def pool():
    with open_pool(devices="cpu,cpu") as p:
        p.start()  # both workers ready before the first item: the work-stealing test depends on it
        yield p


def test_pool_runs_every_item_and_steals_work(pool):
    # One slow item and six quick ones: the quick ones all finish on the other worker meanwhile.
    items = [Item(("slow",), Call(time.sleep, (1.5,)))] + [Item((str(i),), Call(time.sleep, (0.01,))) for i in range(6)]
    outs = list(pool.map_unordered(items))
    assert sorted(o.index for o in outs) == list(range(7)) and all(o.ok and o.attempts == 1 for o in outs)
    slow = next(o for o in outs if o.index == 0)
    assert all(o.worker != slow.worker for o in outs if o.index)
    assert outs[-1].index == 0
    ids = {o.device["uuid"] for o in outs}
    assert len(ids) == 1 and next(iter(ids)).startswith("CPU-")
    assert [d["worker"] for d in pool.devices()] == ["cpu#0", "cpu#1"]


def test_item_sees_its_worker_state_and_errors_are_outcomes(pool):
    outs = sorted(pool.map_unordered([Item(("s",), Call(worker_state)), Item(("bad",), Call(int, ("x",)))]),
                  key=lambda o: o.index)  # fmt: skip
    state = outs[0].value
    assert state.device == "cpu" and state.identity["uuid"].startswith("CPU-") and state.label in ("cpu#0", "cpu#1")
    assert not outs[1].ok and outs[1].error.startswith("ValueError: invalid literal")


def test_item_that_kills_its_worker_is_tried_twice_then_failed(pool):
    items = [Item(("crash",), Call(os._exit, (3,)))] + [Item((str(i),), Call(abs, (-i,))) for i in range(4)]
    outs = {o.index: o for o in pool.map_unordered(items)}
    assert len(outs) == 5 and all(outs[i].ok and outs[i].value == i - 1 for i in range(1, 5))
    crash = outs[0]
    assert not crash.ok and crash.attempts == 2 and "exit code 3" in crash.error
    # Both workers died once and were started again; the pool still runs work.
    assert [o.value for o in pool.map_unordered([Item(("x",), Call(abs, (-7,)))])] == [7]


def test_killed_worker_loses_only_its_in_flight_item(monkeypatch):
    monkeypatch.setenv("SOLKIT_SCALE_TEST_KILL", "cpu#1:2")  # cpu#1 is SIGKILLed when its 2nd item arrives
    items = [Item((str(i),), Call(time.sleep, (0.05,))) for i in range(8)]
    with open_pool(devices="cpu:2") as p:
        p.start()
        outs = list(p.map_unordered(items))
    assert sorted(o.index for o in outs) == list(range(8)) and all(o.ok for o in outs)
    retried = [o for o in outs if o.attempts == 2]
    assert len(retried) == 1 and retried[0].worker == "cpu#0"  # tried again elsewhere


def test_stopped_worker_leaves_at_once_and_phases_are_recorded():
    # A worker told to stop leaves without the interpreter's teardown, which close() would wait for (torch's and the
    # CUDA context's: seconds on a GPU; here a teardown step of 2 s, registered by the setup, stands for it).
    slow_teardown = Call(exec, ("import atexit, time; atexit.register(time.sleep, 2)",))
    with open_pool(devices="cpu:1", setup=slow_teardown) as p:
        assert [o.value for o in p.map_unordered([Item(("a",), Call(abs, (-2,)))])] == [2]
        proc = p.workers[0].proc
        t0 = time.perf_counter()
    assert proc.exitcode == 0 and time.perf_counter() - t0 < 1.0
    ph = p.phases()  # when each step happened, as RayPool.phases says it
    w = ph["actors"]["cpu#0"]
    assert ph["actors_asked"] <= w["born"] <= w["ready"] <= w["hello_read"] <= ph["first_item_asked"]


def test_setup_failure_fails_the_items_with_its_reason():
    with open_pool(devices="cpu:1", setup=Call(int, ("nope",))) as p:
        outs = list(p.map_unordered([Item(("a",), Call(abs, (1,)))]))
    assert len(outs) == 1 and not outs[0].ok
    assert "setup failed" in outs[0].error and "invalid literal" in outs[0].error


def test_bundle_round_trip(tmp_path):
    (tmp_path / "p" / "sub").mkdir(parents=True)
    (tmp_path / "p" / "definition.json").write_text("{}")
    (tmp_path / "p" / "sub" / "k.py").write_bytes(b"\x00\x01")
    (tmp_path / "p" / ".hidden").write_text("x")
    b = pack(tmp_path / "p")
    assert [f for f, _ in b.files] == ["definition.json", "sub/k.py"]
    there = unpacked(b)
    assert there != tmp_path / "p" and (there / "sub" / "k.py").read_bytes() == b"\x00\x01"
    assert unpacked(b) == there  # unpacked once per process
    evil = Bundle("e", (("../escape.txt", b"x"),), "deadbeef")
    with pytest.raises(SolkitError, match="leaves the directory"):
        unpacked(evil)


@pytest.mark.parametrize("devices", [None, "cpu:2"])
def test_run_all_gives_outcomes_in_item_order(devices):
    items = [Item((str(i),), Call(time.sleep, (0.3 if i == 0 else 0.0,))) for i in range(4)]
    items.append(Item(("bad",), Call(int, ("x",))))
    seen = []
    outs = run_all(open_pool(devices=devices), items, on_outcome=lambda o: seen.append(o.index))
    assert [o.index for o in outs] == list(range(5)) and sorted(seen) == list(range(5))
    assert all(o.ok for o in outs[:4]) and not outs[4].ok and "invalid literal" in outs[4].error
