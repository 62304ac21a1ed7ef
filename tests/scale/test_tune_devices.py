"""``solkit tune --workloads all --devices cpu,cpu``: one search per workload, both workers writing one cache."""

import json
import shutil
from pathlib import Path

import pytest

from solkit.cli import main
from solkit.tune.cache import TuneCache
from solkit.tune.shards import workload_indices

PROBLEM = Path(__file__).parents[1] / "tune" / "data" / "scale_problem"


def test_two_workloads_on_two_workers_share_the_cache(tmp_path, capsys):
    prob = tmp_path / "p"
    shutil.copytree(PROBLEM, prob)
    first = json.loads((prob / "workload.jsonl").read_text().splitlines()[0])
    second = {**first, "uuid": "00000000-0000-0000-0000-000000000002", "axes": {"n": 200}}
    with (prob / "workload.jsonl").open("a") as f:
        f.write(json.dumps(second) + "\n")
    argv = ["tune", str(prob), "--solution", str(prob / "solution.json"), "--budget", "2", "--strategy", "random",
            "--cache-dir", str(tmp_path / "cache"), "--workloads", "all", "--devices", "cpu,cpu", "--json"]  # fmt: skip
    assert main(argv) in (0, 1)
    res = json.loads(capsys.readouterr().out)["workloads"]
    assert [r["workload_index"] for r in res] == [0, 1]
    assert [r["axes"] for r in res] == [{"n": 300}, {"n": 200}]
    assert all(len(r["evaluations"]) == 2 and r["device_uuid"].startswith("CPU-") for r in res)
    entries = TuneCache(tmp_path / "cache").entries()
    assert sorted(e["key"]["shape"]["n"] for e in entries) == [256, 512]  # both workers' records, pow2 buckets
    assert sum(len(e["records"]) for e in entries) == 4


@pytest.mark.parametrize("text, count, want", [("all", 3, [0, 1, 2]), ("2,0", 3, [2, 0]), (" 1 ", 2, [1])])
def test_workload_indices(text, count, want):
    assert workload_indices(text, count) == want


@pytest.mark.parametrize("text", ["3", "x", ",", "-1"])
def test_bad_workload_indices(text, capsys):
    assert main(["tune", str(PROBLEM), "--solution", str(PROBLEM / "solution.json"), "--workloads", text]) == 2
    assert "--workloads" in capsys.readouterr().err
