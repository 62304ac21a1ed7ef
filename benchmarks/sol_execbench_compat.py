"""SOL-ExecBench's command lines through ``solkit eval``, with the statuses SOL-ExecBench's own tests expect.

    python benchmarks/sol_execbench_compat.py --out results.json [--mirror GIT_DIR] [--device cpu] [--fast]

Cases: solkit's own samples (tests/harness/compat_samples, tests/harness/examples) always; with ``--mirror`` (a
bare git directory of NVIDIA/SOL-ExecBench) also every sample under its ``tests/sol_execbench/samples`` and its
public ``examples/``, read with ``git show`` into a temporary directory and run unedited. Each case is one
``solkit eval`` command line in SOL-ExecBench's form (positional problem directory, ``--solution``, ``-o``,
``--json``), in its own process; the result records the argv, the exit code, the statuses, the wall time and the
per-phase seconds of every trace. One failing case never stops the others. With ``--jobs N`` the cases run N at a
time, the nvcc builds first (the heaviest first) and at most ``--build-jobs`` of them at once.

    python benchmarks/sol_execbench_compat.py --mirror GIT_DIR --export DIR [--export-prefix examples/pytorch ...]

writes SOL-ExecBench's public examples (by default its PyTorch and Triton ones) into DIR, unedited, for
``solkit eval-suite DIR --solution-glob 'solution_*.json'`` (benchmarks/gpu_jobs/sol_execbench_compat.sh).

Expected statuses are SOL-ExecBench's (its tests/sol_execbench/test_e2e.py and tests/examples/test_examples.py):
every sample PASSED, the ``evil_*`` samples REWARD_HACK. Where solkit cannot run a case here it says why
(``needs``: a GPU for CUDA C++, a package for CuTe DSL / cuTile, the FlashInfer trace data for gqa_paged_decode).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from solkit.harness.phases import TIMED_PHASES, WORKLOAD_PHASES

ROOT = Path(__file__).resolve().parents[1]
# The problem SOL-ExecBench's reward-hack tests evaluate its evil_* samples on (a fact of its test_e2e.py:
# float32 vector add of n = 256, two random workloads), written here as solkit files.
EVIL_DEFINITION = {
    "name": "evil_test_vecadd",
    "axes": {"n": {"type": "const", "value": 256}},
    "inputs": {"x": {"shape": ["n"], "dtype": "float32"}, "y": {"shape": ["n"], "dtype": "float32"}},
    "outputs": {"z": {"shape": ["n"], "dtype": "float32"}},
    "reference": "import torch\ndef run(x, y):\n    return x + y\n",
}
EVIL_WORKLOADS = [{"uuid": "evil-wkl-0001", "axes": {}}, {"uuid": "evil-wkl-0002", "axes": {}}]
# Workloads of solkit's samples built to fail, and how (the rest of each sample must pass).
EXPECT_OVERRIDES = {"paged_gather": {"paged-bad-indptr": "INVALID_REFERENCE"}}
#: Languages whose solutions are compiled with nvcc before they run.
BUILT = {"cuda_cpp", "cutlass", "cudnn", "cublas"}
GPU_LANGUAGES = {"cuda_cpp", "cutlass", "cudnn", "cublas", "cute_dsl", "cutile", "cudnn_frontend"}
FAST = ["--cpu-threads", "1", "--cpu-timing-budget", "0.3", "--timing-trials", "1", "--max-workloads", "2"]


def _git_tree(mirror: Path, prefixes: list[str], dest: Path) -> None:
    names = subprocess.run(["git", "--git-dir", str(mirror), "ls-tree", "-r", "--name-only", "HEAD", *prefixes],
                           check=True, capture_output=True, text=True).stdout.split()  # fmt: skip
    for name in names:
        out = dest / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(subprocess.run(["git", "--git-dir", str(mirror), "show", f"HEAD:{name}"], check=True,
                                       capture_output=True).stdout)  # fmt: skip


def _evil_problem(sample: Path) -> Path:
    """SOL-ExecBench's evil sample dir holds only solution.json + kernel.py: add the problem it is tested on."""
    (sample / "definition.json").write_text(json.dumps(EVIL_DEFINITION))
    (sample / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in EVIL_WORKLOADS))
    return sample


def _languages(solution: Path) -> set[str]:
    try:
        spec = json.loads(solution.read_text()).get("spec") or {}
    except (OSError, ValueError):
        return set()
    return set(spec.get("languages") or [spec.get("language")])


def _needs(problem: Path, solution: Path, device: str) -> str | None:
    langs = _languages(solution)
    if device == "cpu" and langs & GPU_LANGUAGES:
        return f"a CUDA GPU ({', '.join(sorted(langs))})"
    for lang, module in (("cute_dsl", "cutlass"), ("cutile", "cuda.tile")):
        if lang in langs and not _importable(module):
            return f"the {lang} package ({module})"
    text = (problem / "workload.jsonl").read_text()
    if "flashinfer-trace" in text and not os.environ.get("FLASHINFER_TRACE_DIR"):
        return "the FlashInfer trace data (safetensors inputs; set FLASHINFER_TRACE_DIR)"
    return None


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def cases(mirror: Path | None, work: Path) -> list[dict]:
    """SOL-ExecBench's own samples and examples first (with ``mirror``), then solkit's samples."""
    own = []
    for d in sorted((ROOT / "tests" / "harness" / "compat_samples").iterdir()):
        sols = sorted(d.glob("solution*.json"))
        own += [{"source": "solkit", "name": d.name, "problem": d, "solution": s, "expect": "PASSED"} for s in sols]
        if (d / "config.json").is_file():  # SOL-ExecBench's explicit form too: --definition --workload --config
            own.append({"source": "solkit", "name": d.name, "problem": d, "solution": d / "solution.json",
                        "expect": "PASSED", "explicit": True})  # fmt: skip
    for d in sorted((ROOT / "tests" / "harness" / "examples").iterdir()):
        for s in sorted(d.glob("solution*.json")):
            own.append({"source": "solkit", "name": d.name, "problem": d, "solution": s, "expect": "PASSED"})
    if mirror is None:
        return own
    out = []
    try:
        _git_tree(mirror, ["examples", "tests/sol_execbench/samples"], work)
    except (OSError, subprocess.CalledProcessError) as exc:  # no git, or not a git dir: solkit's own cases still run
        print(f"mirror {mirror} unreadable ({type(exc).__name__}: {exc}); SOL-ExecBench's cases skipped", flush=True)
        return own
    samples = work / "tests" / "sol_execbench" / "samples"
    for d in sorted(p for p in samples.iterdir() if p.is_dir()):
        if d.name.startswith("evil_"):
            out.append({"source": "sol-execbench tests", "name": d.name, "problem": _evil_problem(d),
                        "solution": d / "solution.json", "expect": "REWARD_HACK"})  # fmt: skip
            continue
        for s in sorted(d.glob("solution*.json")):
            out.append({"source": "sol-execbench tests", "name": d.name, "problem": d, "solution": s,
                        "expect": "PASSED"})  # fmt: skip
    for d in sorted(p.parent for p in (work / "examples").rglob("definition.json")):
        for s in sorted(d.glob("solution*.json")):
            out.append({"source": "sol-execbench examples", "name": f"{d.parent.name}/{d.name}", "problem": d,
                        "solution": s, "expect": "PASSED"})  # fmt: skip
    return out + own


def run_case(case: dict, device: str, fast: bool, timeout: float, work: Path, max_workloads: int | None = None) -> dict:
    traces_file = work / f"{case['name'].replace('/', '__')}__{case['solution'].stem}.jsonl"
    where = [str(case["problem"])]
    if case.get("explicit"):
        p = Path(case["problem"])
        where = ["--definition", str(p / "definition.json"), "--workload", str(p / "workload.jsonl"),
                 "--config", str(p / "config.json")]  # fmt: skip
        traces_file = traces_file.with_name(traces_file.stem + "__explicit.jsonl")
    speed = FAST if fast and device == "cpu" else []
    speed += ["--max-workloads", str(max_workloads)] if max_workloads and "--max-workloads" not in speed else []
    argv = ["solkit", "eval", *where, "--solution", str(case["solution"]), "-o", str(traces_file),
            "--json", "--device", device, *speed, *case.get("extra", [])]  # fmt: skip
    rec = {k: str(v) if isinstance(v, Path) else v for k, v in case.items()}
    rec["name"] += " (explicit files)" if case.get("explicit") else ""
    rec["argv"] = argv
    needs = _needs(case["problem"], case["solution"], device)
    if needs:
        rec["needs"] = needs
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "solkit", *argv[1:]], capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
        rec["exit_code"] = proc.returncode
        rec["stderr_tail"] = proc.stderr[-600:]
    except subprocess.TimeoutExpired:
        rec["exit_code"], rec["stderr_tail"] = None, f"timed out after {timeout} s"
    rec["wall_s"] = round(time.perf_counter() - t0, 2)
    traces = []
    if traces_file.is_file():
        traces = [json.loads(line) for line in traces_file.read_text().splitlines() if line.strip()]
    overrides = EXPECT_OVERRIDES.get(case["name"], {}) if case["source"] == "solkit" else {}
    want = {t["workload"]["uuid"]: overrides.get(t["workload"]["uuid"], case["expect"]) for t in traces}
    rec["statuses"] = [t["evaluation"]["status"] for t in traces]
    rec["phases_s"] = [(t["evaluation"].get("solkit") or {}).get("phases_s") for t in traces]
    rec.update(overhead(rec["wall_s"], rec["phases_s"]))
    off = [t for t in traces if t["evaluation"]["status"] != want[t["workload"]["uuid"]]]
    rec["logs"] = [t["evaluation"]["log"][:300] for t in off]
    rec["as_expected"] = bool(traces) and not off
    return rec


def overhead(wall_s: float, phases: list[dict | None]) -> dict:
    """Seconds per workload on top of the timed work: (the command's wall clock - every workload's timed phases, the
    candidate's and the reference's timing) / workloads, the issue's "at most 3 s per workload" figure, one-off costs
    (process start-ups, imports, exit) included and shared; and the evaluation's critical path from its timeline
    (docs/sol-execbench.md)."""
    phases = [p for p in phases if p]
    if not phases:
        return {}
    timed = sum(p.get(k) or 0.0 for p in phases for k in TIMED_PHASES)
    out = {"workloads": len(phases), "timing_s": round(timed, 3),
           "overhead_per_workload_wall_s": round((wall_s - timed) / len(phases), 3)}  # fmt: skip
    line = phases[0].get("timeline") or {}
    if line:
        out["timeline"] = line
        out["after_judged_s"] = round(wall_s - (phases[0].get("run") or {}).get("launch", 0.0) - line["judged"], 3)
    return out


def run_suite(root: Path, device: str, fast: bool, timeout: float, work: Path, glob: str = "solution*.json") -> dict:
    """``solkit eval-suite ROOT`` in one process: the one-off costs (start-up, the fork server) shared by every
    problem, as a suite of many problems runs."""
    out_dir = work / "suite"
    speed = FAST if fast and device == "cpu" else []
    argv = ["solkit", "eval-suite", str(root), "-o", str(out_dir), "--json", "--device", device, "--rerun",
            "--solution-glob", glob, *speed]  # fmt: skip
    rec = {"source": "solkit", "name": f"eval-suite {root.name}", "argv": argv, "suite": True}
    t0, epoch = time.perf_counter(), time.time()
    try:
        proc = subprocess.run([sys.executable, "-m", "solkit", *argv[1:]], capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
        rec["exit_code"], rec["stderr_tail"] = proc.returncode, proc.stderr[-600:]
        rec["wall_s"] = round(time.perf_counter() - t0, 2)
    except subprocess.TimeoutExpired:
        rec["exit_code"], rec["stderr_tail"] = None, f"timed out after {timeout} s"
        done = [f.stat().st_mtime for f in out_dir.glob("*.traces.jsonl")]  # the problems it finished, and when
        rec["wall_s"] = round(max(done) - epoch, 2) if done else round(time.perf_counter() - t0, 2)
        rec["cut"] = "the wall clock is up to the last problem finished"
    traces = [json.loads(line) for f in sorted(out_dir.glob("*.traces.jsonl")) for line in f.read_text().splitlines()
              if line.strip()]  # fmt: skip
    rec["problems"] = len(list(out_dir.glob("*.traces.jsonl")))
    rec["statuses"] = [t["evaluation"]["status"] for t in traces]
    rec["phases_s"] = [(t["evaluation"].get("solkit") or {}).get("phases_s") for t in traces]
    rec.update(overhead(rec["wall_s"], rec["phases_s"]))
    rec.pop("timeline", None)  # one per problem: kept in phases_s
    rec.pop("after_judged_s", None)
    rec["as_expected"] = bool(traces) and set(rec["statuses"]) == {"PASSED"}
    return rec


RATIO_NOTE = (
    "Triton's CPU interpreter rounds bf16 differently from a GPU in a few elements: solkit's default requires every "
    "element to match, SOL-ExecBench's (0.99) lets 1 % differ; the case was run again with --matched-ratio 0.99"
)


def _interpreter_rounding(rec: dict, device: str) -> bool:
    text = Path(rec.get("solution", "")).read_text() if Path(rec.get("solution", "")).is_file() else ""
    statuses = set(rec.get("statuses") or [])
    return (
        device == "cpu"
        and "triton" in text
        and "INCORRECT_NUMERICAL" in statuses
        and "bfloat16" in (Path(rec.get("problem", "")) / "definition.json").read_text()
    )


def _line(rec: dict, expect: str) -> str:
    """One case for people: statuses against the expectation, wall time, and the seconds of each phase."""
    phases = [p for p in rec.get("phases_s") or [] if p]
    run = (phases[0].get("run") or {}) if phases else {}
    per = {k: sum(p.get(k) or 0.0 for p in phases) / len(phases) for k in WORKLOAD_PHASES} if phases else {}
    verdict = "ok" if rec["as_expected"] else ("NEEDS " + rec["needs"] if rec.get("needs") else "DIFFERS")
    statuses = ",".join(sorted(set(rec.get("statuses") or []))) or "-"
    times = " ".join(f"{k} {v:.2f}" for k, v in {**run, **per}.items())
    over = rec.get("overhead_per_workload_wall_s")
    over = f"{over:.2f}" if over is not None else "-"
    return (f"{rec.get('name', '')[:30]:30} {Path(rec.get('solution', '')).name[:24]:24} {statuses:26} "
            f"expect {expect:11} {verdict:8} wall {rec.get('wall_s', 0):6.1f} s | s: {times} | "
            f"overhead/workload (wall - timing - reference_timing) {over}")  # fmt: skip


def _write(out: str, meta: dict, results: list[dict]) -> None:
    Path(out).write_text(json.dumps({"meta": meta, "cases": results}, indent=1))


def _built(case: dict) -> bool:
    return bool(_languages(case["solution"]) & BUILT)


def build_weight(solution: Path) -> int:
    """A guess at an nvcc build's cost, so the slowest start first: a ``.cu`` file that includes torch's or CUTLASS's
    headers is one nvcc process of minutes, while the other files compile beside it."""
    try:
        sources = json.loads(solution.read_text()).get("sources") or []
    except (OSError, ValueError):
        return 0
    heavy = 0
    for src in sources:
        path = str(src.get("path", ""))
        text = src.get("content") or ""
        if not text and (solution.parent / path).is_file():  # solkit's samples keep the source beside the JSON
            text = (solution.parent / path).read_text(errors="replace")
        heavy += path.endswith(".cu") and ("torch/extension.h" in text or "cutlass" in text)
    return heavy


def _one(case: dict, args: argparse.Namespace, work: Path, start: float) -> dict | None:
    """One case's record (None when the deadline passed before it started); never raises. With ``--end``, a case
    whose timeout no longer fits starts with the time left when that is at least ``--min-timeout``."""
    if args.deadline and time.perf_counter() - start > args.deadline:
        return None
    cap = args.build_timeout if _built(case) else args.timeout  # nvcc builds take time
    timeout = cap
    if args.end:
        left = args.end - (time.perf_counter() - start)
        if left < min(cap, args.min_timeout or cap):
            return None  # it could run past the job's end
        timeout = min(cap, left)
    try:
        rec = run_case(case, args.device, args.fast, timeout, work, args.max_workloads)
        rec["timeout_s"] = round(timeout, 1)
        if _interpreter_rounding(rec, args.device):  # see RATIO_NOTE
            again = run_case({**case, "extra": ["--matched-ratio", "0.99"]}, args.device, args.fast, args.timeout,
                             work, args.max_workloads)  # fmt: skip
            rec["at_sol_execbench_ratio"] = {k: again.get(k) for k in ("argv", "statuses", "as_expected")}
            rec["note"] = RATIO_NOTE
    except Exception as exc:  # noqa: BLE001 - one broken case never stops the others
        rec = {"name": case["name"], "error": f"{type(exc).__name__}: {exc}", "as_expected": False}
    return rec


def _report(rec: dict, expect: str) -> None:
    print(_line(rec, expect), flush=True)
    tail = (rec.get("stderr_tail") or rec.get("error") or "")[-200:]
    for log in rec.get("logs") or ([tail] if not rec.get("statuses") else []):
        print(f"  why: {log.strip().splitlines()[-1][:200] if log.strip() else '(empty)'}", flush=True)
    if rec.get("at_sol_execbench_ratio"):
        print(f"  at --matched-ratio 0.99: {','.join(sorted(set(rec['at_sol_execbench_ratio']['statuses'])))}")


def _order(todo: list[dict]) -> list[int]:
    """The nvcc builds first, the heaviest first (:func:`build_weight`), then the rest in their order."""
    return sorted(range(len(todo)), key=lambda i: (not _built(todo[i]), -build_weight(todo[i]["solution"])
                                                   if _built(todo[i]) else 0, i))  # fmt: skip


def _run_pool(todo: list[dict], args: argparse.Namespace, work: Path, start: float, done) -> None:
    """Every case, ``--jobs`` at a time and at most ``--build-jobs`` of them nvcc builds (CPU-bound: too many at
    once slow each other past their timeout); ``done(i, rec)`` after each, one at a time."""
    pending, builds = _order(todo), [0]
    limit = max(args.build_jobs or args.jobs, 1)
    cond, report = threading.Condition(), threading.Lock()

    def take() -> int | None:
        with cond:
            while pending:
                for k, i in enumerate(pending):
                    if not _built(todo[i]) or builds[0] < limit:
                        builds[0] += _built(todo[i])
                        return pending.pop(k)
                cond.wait()  # only builds left, as many running as allowed
            return None

    def worker() -> None:
        while (i := take()) is not None:
            try:
                rec = _one(todo[i], args, work, start)
            finally:
                with cond:
                    builds[0] -= _built(todo[i])
                    cond.notify_all()
            with report:
                done(i, rec)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(args.jobs, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _run_cases(todo: list[dict], args: argparse.Namespace, work: Path, start: float, results: list[dict]) -> None:
    """Every case (:func:`_run_pool`); with more than one at a time the statuses count and the times do not (the
    cases share the device and the CPU), so a case that differs is run again alone while ``--rerun-deadline``
    allows."""
    recs: list[dict | None] = [None] * len(todo)

    def done(i: int, rec: dict | None) -> None:
        if rec is None:
            print(f"deadline: {todo[i]['name']} {todo[i]['solution'].name} not started", flush=True)
            return
        rec["concurrent"] = max(args.jobs, 1)
        recs[i] = rec
        _report(rec, todo[i]["expect"])
        _write(args.out, {"device": args.device, "partial": True}, results + [r for r in recs if r])

    _run_pool(todo, args, work, start, done)
    if args.jobs > 1:
        for i, rec in enumerate(recs):
            late = args.rerun_deadline and time.perf_counter() - start > args.rerun_deadline
            if rec is None or rec["as_expected"] or rec.get("needs") or late:
                continue
            alone = _one(todo[i], argparse.Namespace(**{**vars(args), "deadline": None}), work, start)
            if alone is None:  # no time left for it
                continue
            alone["concurrent"], alone["concurrent_run"] = 1, {k: rec.get(k) for k in ("statuses", "logs", "wall_s")}
            recs[i] = alone
            print("again, alone:", end=" ")
            _report(alone, todo[i]["expect"])
    results += [r for r in recs if r]


def export_examples(mirror: Path, prefixes: list[str], dest: Path) -> list[Path]:
    """SOL-ExecBench's files under ``prefixes`` (e.g. ``examples/pytorch``) from the bare ``mirror`` into ``dest``,
    unedited; returns the problem directories."""
    _git_tree(mirror, prefixes, dest)
    return sorted(p.parent for p in dest.rglob("definition.json"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the results JSON (required, except with --export)")
    ap.add_argument("--mirror", default=None, help="bare git dir of NVIDIA/SOL-ExecBench (skipped when absent)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fast", action="store_true", help="CPU: short timing, 2 workloads (statuses)")
    ap.add_argument("--max-workloads", type=int, default=None, help="the first N workloads of each case")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    ap.add_argument("--build-timeout", type=float, default=600.0, help="seconds per case whose solution nvcc builds")
    ap.add_argument("--skip-built", action="store_true", help="leave out the cases whose solution nvcc builds")
    ap.add_argument(
        "--only", default=None, help="substrings of the case names to run, comma-separated (=NAME: that name exactly)"
    )
    ap.add_argument("--deadline", type=float, default=None, help="start no case after this many seconds")
    ap.add_argument("--end", type=float, default=None, help="start no case that could run past this many seconds "
                    "(its own timeout counted)")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=1, help="cases at a time (more than 1: statuses only, not times)")
    ap.add_argument("--build-jobs", type=int, default=None, help="of those, nvcc builds at a time (default --jobs); "
                    "the builds start first, the heaviest first")  # fmt: skip
    ap.add_argument("--min-timeout", type=float, default=None, help="with --end: a case whose timeout no longer fits "
                    "still starts, with the time left, when that is at least this many seconds")  # fmt: skip
    ap.add_argument("--export", default=None, metavar="DIR", help="only write SOL-ExecBench's files under "
                    "--export-prefix from --mirror into DIR (for eval-suite) and exit")  # fmt: skip
    ap.add_argument("--export-prefix", nargs="+", default=["examples/pytorch", "examples/triton"])
    ap.add_argument("--rerun-deadline", type=float, default=None, help="with --jobs: rerun differing cases alone "
                    "until this many seconds")  # fmt: skip
    ap.add_argument("--suite", action="store_true", help="first, eval-suite over tests/harness/examples in one process")
    ap.add_argument("--suite-glob", default="solution*.json", help="the suite's --solution-glob")
    ap.add_argument("--suite-timeout", type=float, default=300.0, help="seconds for the eval-suite")
    args = ap.parse_args(argv)
    mirror = Path(args.mirror) if args.mirror and Path(args.mirror).is_dir() else None
    if args.export:
        if mirror is None:
            print(f"--mirror {args.mirror}: not a directory; nothing exported", file=sys.stderr)
            return 2
        dirs = export_examples(mirror, args.export_prefix, Path(args.export))
        workloads = sum(len((d / "workload.jsonl").read_text().splitlines()) for d in dirs)
        print(f"exported {len(dirs)} problems, {workloads} workloads: {', '.join(d.name for d in dirs)}")
        return 0
    if not args.out:
        ap.error("--out is required")
    work = Path(tempfile.mkdtemp(prefix="solkit_sxb_"))
    results: list[dict] = []
    try:
        start = time.perf_counter()
        if args.suite:  # alone on the machine: its times are the overhead measurement
            rec = run_suite(ROOT / "tests" / "harness" / "examples", args.device, args.fast, args.suite_timeout, work,
                            args.suite_glob)  # fmt: skip
            results.append(rec)
            print(_line(rec, "PASSED") + f" | {rec.get('problems', 0)} problems, {rec.get('workloads', 0)} "
                  f"workloads", flush=True)  # fmt: skip
            _write(args.out, {"device": args.device, "partial": True}, results)
        only = [o for o in (args.only or "").split(",") if o]
        picked = (lambda n: any(n == o[1:] if o.startswith("=") else o in n for o in only)) if only else None
        todo = [c for c in cases(mirror, work) if picked is None or picked(c["name"])]
        todo = [c for c in todo if not (args.skip_built and _languages(c["solution"]) & BUILT)]
        _run_cases(todo, args, work, start, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    meta = {"date": dt.datetime.now(dt.timezone.utc).isoformat(), "device": args.device, "command": sys.argv,
            "script": "benchmarks/sol_execbench_compat.py", "commit": commit.stdout.strip() or "unknown",
            "python": platform.python_version(), "mirror": str(mirror) if mirror else None, "jobs": args.jobs,
            "times": "per case only where concurrent is 1; the suite ran alone"}  # fmt: skip
    try:
        from solkit.harness.languages import status

        meta["languages"] = status()
        import torch

        meta["torch"] = torch.__version__
        meta["device_name"] = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor()
        import triton

        meta["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001 - versions are informative
        meta["versions_error"] = repr(exc)
    _write(args.out, meta, results)
    ok = sum(r["as_expected"] for r in results)
    print(f"{ok} of {len(results)} cases as SOL-ExecBench expects; {sum(bool(r.get('needs')) for r in results)} "
          f"need something this machine lacks -> {args.out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
