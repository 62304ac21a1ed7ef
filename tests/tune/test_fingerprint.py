"""The tune cache is keyed by a device fingerprint, and another device's records can seed a search (CPU)."""

import time

import pytest
import torch

from solkit.errors import SolkitError
from solkit.tune.cache import TuneCache, fingerprint, fingerprint_id, fingerprint_matches, make_key
from solkit.tune.records import TuneProblem
from solkit.tune.space import Space, config_key
from solkit.tune.tuner import tune

VERSIONS = {"triton": "3.6.0", "cuda": "13.0", "torch": "2.11.0"}
H200 = {"product": "h200-sxm", "device": "NVIDIA H200", "capability": "sm_90", "sm_count": 132,
        "memory_bytes": 150_000_000_000, **VERSIONS}  # fmt: skip
H100_SXM = {"product": "h100-sxm", "device": "NVIDIA H100 80GB HBM3", "capability": "sm_90", "sm_count": 132,
            "memory_bytes": 85_000_000_000, **VERSIONS}  # fmt: skip
H100_PCIE = {**H100_SXM, "product": "h100-pcie", "sm_count": 114}
RTX4090 = {"product": "rtx-4090", "device": "NVIDIA GeForce RTX 4090", "capability": "sm_89", "sm_count": 128,
           "memory_bytes": 25_000_000_000, **VERSIONS}  # fmt: skip


def key(env, m=1024, kernel="k"):
    return make_key(kernel, {"M": m}, ["bf16"], env)


def rec(work, t):
    return {"config": {"work": work}, "status": "ok" if t is not None else "runtime_error", "time_ms": t}


def test_two_gpus_never_share_an_entry():
    base = key(H200)
    assert base == key(dict(H200))
    for env in (H100_SXM, H100_PCIE, RTX4090, {**H200, "sm_count": 114}, {**H200, "memory_bytes": 1},
                {**H200, "capability": "sm_100"}, {**H200, "product": None}, {**H200, "triton": "3.5.0"}):  # fmt: skip
        assert key(env) != base
    assert key(H100_SXM) != key(H100_PCIE)  # same name, different SM count


def test_fingerprint_matches_product_name_capability_and_id():
    fp = fingerprint(H200)
    for ref in ("h200-sxm", "NVIDIA H200", "sm_90", "9.0", "90", fingerprint_id(fp), fingerprint_id(fp)[:6]):
        assert fingerprint_matches(fp, ref), ref
    for ref in ("h100-sxm", "sm_89", fingerprint_id(fp)[:5], "", "h200"):
        assert not fingerprint_matches(fp, ref), ref


def test_prior_stays_on_its_own_device(tmp_path):
    cache = TuneCache(tmp_path)
    cache.add(key(H100_SXM, m=4096), [rec(1, 1.0), rec(2, 2.0)])
    assert not cache.prior(key(H200))  # another card's records never warm-start silently
    cache.add(key(H200, m=4096), [rec(1, 1.0)])
    assert cache.prior(key(H200))


def test_warm_start_ranks_the_other_devices_best_configs(tmp_path):
    cache = TuneCache(tmp_path)
    cache.add(key(H200, m=1024), [rec(1, 3.0), rec(2, 1.0), rec(3, 2.0), rec(4, None)])
    cache.add(key(H200, m=4096), [rec(1, 6.0), rec(2, 2.0), rec(3, 5.0)])
    cache.add(key(H100_SXM), [rec(3, 0.1)])  # another device: not asked for
    prior, seeds, used = cache.warm_start(key(RTX4090), "h200-sxm", top=2)
    assert seeds == [{"work": 2}, {"work": 3}]
    assert prior.score(config_key({"work": 2})) == 1.0
    assert len(used) == 1 and used[0].startswith("h200-sxm (NVIDIA H200, sm_90, 132 SMs")
    # By compute capability: both sm_90 devices' records count.
    _, _, used = cache.warm_start(key(RTX4090), "sm_90")
    assert len(used) == 2


def test_warm_start_without_records_is_one_line(tmp_path):
    cache = TuneCache(tmp_path)
    cache.add(key(H200), [rec(1, 1.0)])
    with pytest.raises(SolkitError, match=r"--warm-start-from b200: no measured configs .* recorded: h200-sxm"):
        cache.warm_start(key(RTX4090), "b200")
    with pytest.raises(SolkitError):  # its own records are the cache, not a warm start
        cache.warm_start(key(H200), "h200-sxm")


def sleepy_problem(calls):
    def make_inputs(seed):
        return (torch.ones(8), torch.empty(8))

    def run(cfg, inputs):
        calls.append(cfg["work"])
        time.sleep(0.0002 * cfg["work"])
        torch.mul(inputs[0], 2.0, out=inputs[1])
        return inputs[1]

    return TuneProblem("sleepy", make_inputs, run, reference=lambda inp: inp[0].double() * 2, output_index=1)


def test_seeds_are_measured_first_on_the_new_device(tmp_path):
    cache = TuneCache(tmp_path)
    cache.add(key(H200), [rec(5, 0.5), rec(1, 9.0)])  # on the H200 work=5 looked best
    prior, seeds, _ = cache.warm_start(key(RTX4090), "h200-sxm", top=1)
    calls = []
    new = key(RTX4090)
    res = tune(sleepy_problem(calls), Space({"work": [1, 2, 3, 4, 5, 6]}), strategy="random", budget=3, cache=cache,
               cache_key=new, prior=prior, seeds=seeds, pool=None)  # fmt: skip
    assert res.seeded == 1 and calls[0] == 5  # the seed ran first, here
    assert res.evaluations[0]["config"] == {"work": 5} and res.evaluations[0]["time_ms"] != 0.5
    assert len(res.evaluations) == 3  # the seed counted against the budget
    assert config_key({"work": 5}) in cache.load(new)  # measured here, stored under this device
    assert res.best is not None and res.best_ms is not None


def test_cli_warm_start_from_another_device(tmp_path, capsys):
    import json
    from pathlib import Path

    from solkit.cli import main

    problem = Path(__file__).parent / "data" / "scale_problem"
    base = ["tune", str(problem), "--solution", str(problem / "solution.json"), "--json"]
    assert main([*base, "--budget", "20", "--cache-dir", str(tmp_path / "here")]) == 0
    capsys.readouterr()
    # Those records as if an H200 had measured them: relabel the export's fingerprint, import into a fresh cache.
    TuneCache(tmp_path / "here").export(tmp_path / "x.json")
    data = json.loads((tmp_path / "x.json").read_text())
    for entry in data["entries"]:
        entry["key"]["fingerprint"] = fingerprint(H200)
    (tmp_path / "x.json").write_text(json.dumps(data))
    fresh = ["--cache-dir", str(tmp_path / "fresh")]
    assert main(["tune", "--cache-import", str(tmp_path / "x.json"), *fresh]) == 0
    capsys.readouterr()
    assert main([*base, "--budget", "3", "--warm-start-from", "h200-sxm", *fresh]) == 0
    out = json.loads(capsys.readouterr().out)
    ws = out["warm_started_from"]
    assert out["seeded"] >= 1 and out["evaluated"] == 3 and ws["devices"][0].startswith("h200-sxm")
    measured = [e["config"] for e in out["evaluations"]]
    assert measured[: out["seeded"]] == ws["seed_configs"][: out["seeded"]]  # seeds first, measured here
    assert main([*base, "--warm-start-from", "b200", *fresh]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--warm-start-from b200" in err and "h200-sxm" in err
