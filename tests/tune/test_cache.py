import json

import pytest

from solkit.errors import SolkitError
from solkit.tune.cache import TuneCache, make_key, pick_winner, shape_bucket
from solkit.tune.space import config_key

ENV = {"device": "NVIDIA H200", "capability": "sm_90", "triton": "3.6.0", "cuda": "13.0", "torch": "2.11.0"}


def rec(bm, t, status="ok"):
    r = {"config": {"BLOCK_M": bm, "num_warps": 4}, "status": status}
    if t is not None:
        r["time_ms"] = t
    return r


@pytest.mark.parametrize("value,bucket", [(1, 1), (64, 64), (65, 128), (1000, 1024), (4096, 4096), (4097, 8192)])
def test_shape_bucket(value, bucket):
    assert shape_bucket(value) == bucket
    assert shape_bucket(value, "exact") == value


def test_key_covers_kernel_shape_dtype_device_versions():
    base = make_key("k1", {"M": 1000}, ["torch.bfloat16"], ENV)
    assert base == make_key("k1", {"M": 1024}, ["torch.bfloat16"], ENV)  # same bucket
    for other in (
        make_key("k2", {"M": 1000}, ["torch.bfloat16"], ENV),
        make_key("k1", {"M": 5000}, ["torch.bfloat16"], ENV),
        make_key("k1", {"M": 1000}, ["torch.float16"], ENV),
        make_key("k1", {"M": 1000}, ["torch.bfloat16"], {**ENV, "device": "NVIDIA H100 80GB HBM3"}),
        make_key("k1", {"M": 1000}, ["torch.bfloat16"], {**ENV, "triton": "3.5.0"}),
    ):
        assert other != base


def test_records_merge_and_winner_is_deterministic(tmp_path):
    cache = TuneCache(tmp_path)
    key = make_key("k", {"M": 128}, ["bf16"], ENV)
    cache.add(key, [rec(64, 1.0), rec(128, 0.5), rec(256, None, "out_of_resources")])
    cache.add(key, [rec(32, 0.5)])  # a tie with BLOCK_M=128: broken by the canonical config key
    records = cache.load(key)
    assert len(records) == 4
    win = cache.winner(key)
    assert win == {"BLOCK_M": 128, "num_warps": 4}
    assert config_key(win) < config_key({"BLOCK_M": 32, "num_warps": 4})
    # identical answer from a fresh reader, whatever the record order
    shuffled = dict(reversed(list(records.items())))
    assert pick_winner(shuffled) == pick_winner(records)
    # a failed config never wins, even with a time
    cache.add(key, [{"config": {"BLOCK_M": 16, "num_warps": 4}, "status": "wrong_result", "time_ms": 0.01}])
    assert cache.winner(key) == win


def test_export_import_and_prior(tmp_path):
    a = TuneCache(tmp_path / "a")
    k1 = make_key("k", {"M": 128}, ["bf16"], ENV)
    k2 = make_key("k", {"M": 4096}, ["bf16"], ENV)
    a.add(k1, [rec(64, 1.0), rec(128, 2.0)])
    a.add(k2, [rec(64, 3.0), rec(128, 1.5)])
    assert a.export(tmp_path / "x.json") == 2
    b = TuneCache(tmp_path / "b")
    assert b.import_(tmp_path / "x.json") == 2
    assert b.load(k1) == a.load(k1)
    prior = b.prior(k1)  # warm start from the *other* shape only
    assert len(prior.tasks) == 1
    assert prior.score(config_key({"BLOCK_M": 128, "num_warps": 4})) == pytest.approx(1.0)
    assert prior.score(config_key({"BLOCK_M": 64, "num_warps": 4})) == pytest.approx(0.5)


def test_bad_files(tmp_path):
    cache = TuneCache(tmp_path)
    key = make_key("k", {}, [], ENV)
    cache.add(key, [rec(64, 1.0)])
    path = next(tmp_path.glob("k/*.json"))
    path.write_text("{not json")
    assert cache.load(key) == {}
    (tmp_path / "bad.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(SolkitError, match="not a solkit tune cache export"):
        cache.import_(tmp_path / "bad.json")
