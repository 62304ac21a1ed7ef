"""benchmarks/sol_execbench_compat.py's scheduling: the nvcc builds first, the heaviest first, a few at a time."""

import argparse
import importlib.util
import json
import threading
import time
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "sol_execbench_compat.py"


def _script():
    spec = importlib.util.spec_from_file_location("sol_execbench_compat_sched", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _solution(tmp_path: Path, name: str, lang: str, source: str = "") -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"spec": {"languages": [lang]}, "sources": [{"path": "k.cu", "content": source}]}))
    return path


def test_builds_start_first_heaviest_first_and_at_most_build_jobs_at_once(tmp_path, monkeypatch):
    script = _script()
    light = [_solution(tmp_path, f"light{i}", "cuda_cpp", "__global__ void k() {}") for i in range(3)]
    heavy = _solution(tmp_path, "heavy", "cuda_cpp", "#include <torch/extension.h>\n")
    others = [_solution(tmp_path, f"py{i}", "pytorch") for i in range(4)]
    todo = [{"name": p.stem, "solution": p} for p in (*others, *light, heavy)]
    running, peak, started, lock = [0], [0], [], threading.Lock()

    def one(case, args, work, start):
        built = not case["name"].startswith("py")
        with lock:
            started.append(case["name"])
            running[0] += built
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= built
        return {"name": case["name"]}

    monkeypatch.setattr(script, "_one", one)
    done = []
    args = argparse.Namespace(jobs=3, build_jobs=2)
    script._run_pool(todo, args, tmp_path, time.perf_counter(), lambda i, rec: done.append(rec["name"]))
    assert sorted(done) == sorted(c["name"] for c in todo)
    assert started[0] == "heavy" and set(started[:2]) <= {"heavy", "light0"}
    assert peak[0] == 2  # never more builds at once than --build-jobs, while the other cases fill the free slots
    assert started.index("py0") < started.index("light2")


def test_a_case_whose_timeout_no_longer_fits_starts_with_the_time_left(tmp_path, monkeypatch):
    script = _script()
    seen = []
    monkeypatch.setattr(script, "run_case", lambda case, dev, fast, timeout, work, mw: seen.append(timeout) or {})
    case = {"name": "b", "solution": _solution(tmp_path, "b", "cuda_cpp")}
    args = argparse.Namespace(deadline=None, build_timeout=240.0, timeout=60.0, end=100.0, min_timeout=90.0,
                              device="cpu", fast=True, max_workloads=2)  # fmt: skip
    start = time.perf_counter()
    assert script._one(case, args, tmp_path, start) is not None and 90 <= seen[0] <= 100
    args.end = 80.0  # less than --min-timeout left: not started
    assert script._one(case, args, tmp_path, start) is None
