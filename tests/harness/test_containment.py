"""Containment and the judge's independence from the candidate process (issue 20), on the CPU.

Each test runs a hostile candidate through the whole harness and checks an effect outside the verdict:
the file it tried to write or delete, the process it tried to leave behind or kill, the secret it tried to
read, the number of restarts, the temporary directories left over.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from harness_helpers import CHEAT_PROBLEM, CHEATS, SMALL_CHEAT_WORKLOADS, fast_options

from solkit.errors import SolkitError
from solkit.harness import sandbox
from solkit.harness.evaluate import evaluate

RMS = "x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * weight"
PLAN = sandbox.probe()
CONTAINED = PLAN["namespaces"] and PLAN["landlock_abi"] > 0
needs_sandbox = pytest.mark.skipif(not CONTAINED, reason="needs unshare namespaces and Landlock")


def write_solution(tmp_path: Path, code: str, name: str = "solution.json") -> Path:
    sol = {"name": f"s_{tmp_path.name}", "definition": "rmsnorm_fp32_cheats", "author": "t",
           "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "kernel.py::run",
                    "destination_passing_style": False},
           "sources": [{"path": "kernel.py", "content": code}]}  # fmt: skip
    path = tmp_path / name
    path.write_text(json.dumps(sol))
    return path


def run_case(case: str, **over):
    opts = fast_options(workloads=SMALL_CHEAT_WORKLOADS, **over)
    return evaluate(CHEAT_PROBLEM, CHEATS / case / "solution.json", opts)


def statuses(traces) -> list[str]:
    return [t.evaluation.status.value for t in traces]


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


@needs_sandbox
def test_the_trace_records_the_containment_in_force():
    traces = run_case("correct_pytorch")
    rec = traces[0].evaluation.solkit["containment"]
    assert statuses(traces) == ["PASSED", "PASSED"]
    assert rec["sandbox"] and rec["namespaces"] == "pid, mount, net" and rec["environment"] == "allowlist"
    assert rec["landlock"]["abi"] >= 1 and "error" not in rec["landlock"]
    assert any("/proc" in r for r in rec["landlock"]["rules"])  # CUDA's driver writes its own /proc entry
    assert any(r.startswith("nofile=") for r in rec["rlimits"])


def test_no_sandbox_is_recorded_and_still_judged():
    traces = run_case("correct_pytorch", sandbox="off")
    assert statuses(traces) == ["PASSED", "PASSED"]
    assert traces[0].evaluation.solkit["containment"]["sandbox"] is False
    assert statuses(run_case("zeros", sandbox="off")) == ["INCORRECT_NUMERICAL"] * 2


def test_require_sandbox_refuses_without_it(monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: {"namespaces": False, "landlock_abi": 0})
    with pytest.raises(SolkitError, match="--require-sandbox"):
        run_case("correct_pytorch", sandbox="require")


def test_the_secret_in_the_callers_environment_is_not_visible(monkeypatch):
    monkeypatch.setenv("SOLKIT_TEST_SECRET_TOKEN", "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter3")
    assert statuses(run_case("env_secret")) == ["PASSED", "PASSED"]  # zeros if it had seen either


@needs_sandbox
def test_writes_outside_the_scratch_directory_fail():
    target = Path("/tmp/solkit_pwned_write_outside")
    target.unlink(missing_ok=True)
    assert statuses(run_case("write_outside")) == ["PASSED", "PASSED"]  # zeros if a write had succeeded
    assert not target.exists()


@needs_sandbox
def test_no_network():
    assert statuses(run_case("network")) == ["PASSED", "PASSED"]  # zeros if a bind or connect had succeeded


@needs_sandbox
def test_problem_files_and_a_sibling_problem_cannot_be_damaged(tmp_path):
    mine, sibling = tmp_path / "mine", tmp_path / "sibling"
    shutil.copytree(CHEAT_PROBLEM, mine)
    shutil.copytree(CHEAT_PROBLEM, sibling)
    before = {p: p.read_bytes() for p in (*mine.iterdir(), *sibling.iterdir())}
    code = (
        "import os\nimport torch\n"
        f"for p in ({str(mine / 'definition.json')!r}, {str(mine / 'workload.jsonl')!r}):\n"
        "    try:\n        os.remove(p)\n    except OSError:\n        pass\n"
        f"try:\n    open({str(sibling / 'workload.jsonl')!r}, 'w').write('{{}}')\nexcept OSError:\n    pass\n"
        f"\ndef run(x, weight):\n    return {RMS}\n"
    )
    traces = evaluate(mine, write_solution(tmp_path, code), fast_options(workloads=SMALL_CHEAT_WORKLOADS))
    assert statuses(traces) == ["PASSED", "PASSED"]
    assert {p: p.read_bytes() for p in before} == before


@needs_sandbox
def test_the_candidate_cannot_signal_processes_outside(tmp_path):
    victim = subprocess.Popen(["sleep", "60"])
    try:
        code = (
            "import os, signal\nimport torch\n"
            f"for pid in ({victim.pid}, os.getppid()):\n"
            "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"
            f"\ndef run(x, weight):\n    return {RMS}\n"
        )
        traces = evaluate(CHEAT_PROBLEM, write_solution(tmp_path, code), fast_options(workloads=SMALL_CHEAT_WORKLOADS))
        assert victim.poll() is None, "the candidate killed a process outside its sandbox"
        assert all(s in ("PASSED", "COMPILE_ERROR") for s in statuses(traces))
    finally:
        victim.kill()
        victim.wait()


def test_a_stopped_process_reads_as_not_running_and_keeps_its_identity():
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        born = sandbox.start_time(sleeper.pid)
        assert born > 0 and sandbox.state(sleeper.pid) not in sandbox.NOT_RUNNING
        os.kill(sleeper.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while sandbox.state(sleeper.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sandbox.state(sleeper.pid) == "T" and sandbox.start_time(sleeper.pid) == born
    finally:
        sleeper.kill()
        sleeper.wait()
    assert sandbox.state(sleeper.pid) is None and sandbox.start_time(sleeper.pid) == 0


def _own_markers(case: str, folder: Path) -> tuple[Path, list[str]]:
    """A copy of a corpus case whose `sleep` durations are unique to this process: the corpus test may run the same
    case on another worker meanwhile, and its sleeps must not be taken for ours."""
    mapping = {m: f"{m}{os.getpid()}" for m in ("4242.5", "4243.5", "4244.5")}
    shutil.copytree(CHEATS / case, folder / case)
    for f in [*(folder / case).glob("*.py"), folder / case / "solution.json"]:
        text = f.read_text()
        for old, new in mapping.items():
            text = text.replace(old, new)
        f.write_text(text)
    return folder / case / "solution.json", list(mapping.values())


def test_setsid_and_daemonised_descendants_do_not_outlive_the_evaluation(tmp_path):
    opts = fast_options(workloads=SMALL_CHEAT_WORKLOADS)
    survivor, markers = _own_markers("setsid_survivor", tmp_path)
    children, _ = _own_markers("fork_children", tmp_path)
    kernels = " ".join(f.read_text() for f in tmp_path.rglob("kernel.py"))
    assert all(m in kernels for m in markers)  # the copies' sleeps carry this process's markers
    assert statuses(evaluate(CHEAT_PROBLEM, survivor, opts)) == ["PASSED", "PASSED"]
    assert statuses(evaluate(CHEAT_PROBLEM, children, opts))[0] in ("PASSED", "REWARD_HACK")
    time.sleep(0.5)
    for marker in markers:
        assert not processes_with(marker), f"sleep {marker} outlived the evaluation"


def test_temporary_directories_are_removed(tmp_path, monkeypatch):
    # a private temporary directory: other test workers' evaluations make and remove their own meanwhile
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    run_case("correct_pytorch")
    run_case("exit_at_import")
    assert not list(private.glob("solkit_eval_*"))


def test_a_misbehaving_worker_is_restarted_once_then_the_suite_goes_on(tmp_path):
    problem = tmp_path / "p"
    shutil.copytree(CHEAT_PROBLEM, problem)
    rows = [{"uuid": f"w{i}", "axes": {"num_rows": 8 + i, "hidden": 64},
             "inputs": {"x": {"type": "random"}, "weight": {"type": "random"}}} for i in range(5)]  # fmt: skip
    (problem / "workload.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    t0 = time.monotonic()
    traces = evaluate(problem, CHEATS / "done_only" / "solution.json", fast_options())
    assert statuses(traces) == ["RUNTIME_ERROR"] * 5
    assert "not restarted again" in traces[2].evaluation.log and "not restarted again" in traces[4].evaluation.log
    assert time.monotonic() - t0 < 90
    traces = evaluate(problem, CHEATS / "sleep_forever_at_call" / "solution.json", fast_options(run_timeout=3))
    assert statuses(traces) == ["TIMEOUT", "TIMEOUT", "RUNTIME_ERROR", "RUNTIME_ERROR", "RUNTIME_ERROR"]


def test_inputs_are_salted_per_run_unless_asked_not_to():
    a, b = run_case("correct_pytorch"), run_case("correct_pytorch")
    na, nb = a[0].evaluation.solkit["inputs"], b[0].evaluation.solkit["inputs"]
    assert "salted" in na and na != nb and a[0].evaluation.environment.seed == 200
    assert "inputs" not in run_case("correct_pytorch", secret_seed=False)[0].evaluation.solkit


def test_forged_lines_on_stdout_are_only_the_log():
    assert statuses(run_case("stdout_flood")) == ["PASSED", "PASSED"]


@pytest.mark.parametrize("n", [4096, 65536])
def test_fp16_computed_in_bf16_is_below_the_contract_and_honest_fp16_is_not(n):
    import torch

    from solkit.harness import anticheat as ac

    g = torch.Generator().manual_seed(n)
    x64 = torch.randn(n, generator=g, dtype=torch.float64) * 3
    ref = x64.to(torch.float16)  # the reference: one rounding to fp16
    honest = (x64 * (1 + 1e-4)).to(torch.float16)  # another order of operations: about one fp16 rounding off
    bf16 = x64.to(torch.bfloat16).to(torch.float16)
    assert not ac.precision(ref, x64, honest, torch.float16)["downgraded"]
    assert ac.precision(ref, x64, bf16, torch.float16)["downgraded"]
    fp8 = x64.to(torch.float8_e4m3fn).to(torch.bfloat16)
    assert ac.precision(x64.to(torch.bfloat16), x64, fp8, torch.bfloat16)["downgraded"]
    assert ac.precision(x64.to(torch.float32), x64, x64.to(torch.bfloat16).float(), torch.float32)["downgraded"]


# ---------------------------------------------------------------------------------------------- bookkeeping
FAST_CLI = ["--device", "cpu", "--reps", "2", "--timing-trials", "1", "--warmup", "0", "--cpu-threads", "1"]


@pytest.mark.parametrize("argv,flag", [
    (["--max-workloads", "0"], "--max-workloads"), (["--max-workloads", "-3"], "--max-workloads"),
    (["--timeout", "nan"], "--timeout"), (["--timeout", "0"], "--timeout"), (["--timeout", "-1"], "--timeout"),
    (["--compile-timeout", "inf"], "--compile-timeout"), (["--reps", "0"], "--reps"), (["--reps", "-1"], "--reps"),
    (["--cooldown-ms", "nan"], "--cooldown-ms"),
])  # fmt: skip
def test_bad_eval_flags_are_one_line_and_exit_2_before_any_work(argv, flag, capsys):
    from solkit.cli import main

    t0 = time.monotonic()
    assert main(["eval", str(CHEAT_PROBLEM), *FAST_CLI, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert flag in err and "Traceback" not in err
    assert time.monotonic() - t0 < 5  # before any evaluation


def test_output_pointing_at_a_directory_is_refused_before_work(tmp_path, capsys):
    from solkit.cli import main

    assert main(["eval", str(CHEAT_PROBLEM), *FAST_CLI, "-o", str(tmp_path)]) == 2
    assert "-o/--output" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main(["eval-suite", str(CHEAT_PROBLEM), *FAST_CLI, "-o", str(tmp_path / "file")]) == 2
    assert "-o/--output" in capsys.readouterr().err


def test_solution_glob_cannot_leave_the_problem(tmp_path, capsys):
    from solkit.cli import main

    assert main(["eval-suite", str(CHEAT_PROBLEM), *FAST_CLI, "--solution-glob", "../../**"]) == 2
    assert "--solution-glob" in capsys.readouterr().err
    from solkit.harness.cli import _solutions

    problem = tmp_path / "p"
    problem.mkdir()
    (problem / "solution_a.json").write_text("{}")
    (tmp_path / "solution_outside.json").write_text("{}")
    (problem / "solution_link.json").symlink_to(tmp_path / "solution_outside.json")
    assert [s.name for s in _solutions(problem, "solution*.json")] == ["solution_a.json"]


def test_nested_and_flattened_problem_names_get_different_trace_files(tmp_path):
    from solkit.harness.cli import _trace_file

    a = _trace_file(tmp_path, tmp_path, tmp_path / "x" / "y")
    b = _trace_file(tmp_path, tmp_path, tmp_path / "x__y")
    assert a != b and a.name == "x__y.traces.jsonl"


def test_a_resumed_suite_keeps_the_first_runs_errors(tmp_path, capsys):
    from solkit.cli import main

    root = tmp_path / "suite"
    shutil.copytree(CHEAT_PROBLEM, root / "p")
    (root / "p" / "solution_bad.json").write_text("{not json")
    out = tmp_path / "traces"
    argv = ["eval-suite", str(root), "-o", str(out), "--json", "--max-workloads", "1", *FAST_CLI]
    assert main(argv) == 1
    first = json.loads(capsys.readouterr().out)["problems"]["p"]
    assert first["errors"]
    assert main(argv) == 1  # resumed: the traces file is there, the error is not forgotten
    again = json.loads(capsys.readouterr().out)["problems"]["p"]
    assert again["resumed"] and again["errors"] == first["errors"] and not again["all_passed"]


def test_candidate_import_path_keeps_the_callers_import_directories(tmp_path, monkeypatch):
    # A judge that found its dependencies on PYTHONPATH (a --target site of wheels) must hand those directories on,
    # or the candidate dies at start-up; values that are not directories do not pass.
    from solkit.harness import sandbox

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), "not-a-dir", "", str(site)]))
    path = sandbox.import_path(tmp_path / "src").split(os.pathsep)
    assert path == [str(tmp_path / "src"), str(site)]
    env = sandbox.child_env(tmp_path / "scratch", "m", os.pathsep.join(path))
    assert env["PYTHONPATH"].split(os.pathsep) == path
