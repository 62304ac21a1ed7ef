"""The compile warm-up: worker processes fill Inductor's caches, and the main process then hits them."""

import json
import os
import subprocess
import sys

import pytest

from solkit.bench.precompile import default_workers, precompile
from solkit.bench.runner import BenchConfig, select, suite_problems

CHECK = """
import json, torch
from torch._dynamo.utils import counters
from solkit.backends import BACKENDS
from solkit.bench.runner import BenchConfig, clone_values, select, suite_problems
from solkit.harness.inputs import InputFactory
p, w = select(suite_problems(), BenchConfig(device="cpu", sizes=("s",), ops=("softmax",)))[0]
fn = BACKENDS["compile"].make(p.definition.name, p.reference_fn())
fn(*clone_values(InputFactory(p, torch.device("cpu")).generate(w, 0)).values())
print(json.dumps(dict(counters["inductor"])))
"""


def test_default_workers_only_on_a_gpu():
    assert default_workers("cpu") == 0
    assert 1 <= default_workers("cuda:0") <= 8


@pytest.mark.slow
def test_warm_up_fills_the_cache_the_main_process_hits(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    chosen = select(suite_problems(), BenchConfig(device="cpu", sizes=("s",), ops=("softmax",)))[:1]
    summary = precompile(chosen, "cpu", None, workers=1, timeout_s=300)
    assert summary["failed"] == {} and summary["workloads"] == 1 and summary["compile_s"] > 0
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, check=True)
    counters = json.loads(out.stdout.strip().splitlines()[-1])
    assert counters.get("fxgraph_cache_hit", 0) >= 1 and counters.get("fxgraph_cache_miss", 0) == 0


def test_a_broken_workload_is_reported_not_raised(tmp_path):
    class P:
        root = tmp_path / "missing_problem"

    class W:
        uuid = "nope"

    summary = precompile([(P(), W())], "cpu", None, workers=1, timeout_s=120)
    assert list(summary["failed"]) == ["nope"] and "SolkitError" in summary["failed"]["nope"]
