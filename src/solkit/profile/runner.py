"""Profile problems end to end: timing run, ncu run, attribution, diagnosis, one report dict.

Two subprocesses run :mod:`solkit.profile.driver`: first plainly (harness timing = T_measured,
NVML telemetry, torch.profiler kernel list), then under ncu (counters for exactly one call per
target). Whatever cannot run degrades to a one-line reason in ``report["degraded"]`` while the
rest is still reported: no GPU, no ncu, no counter permission, a profiler library that does not
load, a target that crashes (recorded, the others kept).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import solkit
from solkit.errors import SolkitError
from solkit.profile import ncu as ncu_mod
from solkit.profile import ncu_parse
from solkit.profile.diagnose import diagnose_target, sol_block

SCHEMA_VERSION = 1
AFTER_DEGRADE = "per-kernel counters skipped; timing, NVML telemetry and torch.profiler's kernel list still reported"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "_", text)[:80]


def plan_targets(
    problem_dirs: list[str | Path],
    solution: str | Path | list[str | Path] | None,
    workload: str | list[str] | None,
) -> list[dict]:
    """The reference of every problem plus its solutions, each on one workload.

    ``solution``: one path or several. A ``solution.json`` goes with the problem whose definition
    name its ``definition`` field names; a ``.py`` (no such field) needs exactly one PROBLEM_DIR;
    ``bench:<backend>`` (a ``solkit bench`` backend, e.g. ``bench:solkit``) applies to every problem.
    Without ``solution``, every ``solution*.json`` inside each problem directory is used.
    ``workload``: one uuid (prefix) or several; each problem takes the first that matches one of its
    workloads (default: its first workload).
    """
    from solkit.profile.target import pick_workload, read_problem

    given = [solution] if isinstance(solution, (str, Path)) else list(solution or [])
    backends = [str(p) for p in given if str(p).startswith("bench:")]  # a bench backend: every problem
    sols = [Path(p) for p in given if not str(p).startswith("bench:")]
    wanted = [workload] if isinstance(workload, str) else list(workload or [])
    for sol in sols:
        if not sol.exists():
            raise SolkitError(f"--solution {sol}: file not found")
    problems = []
    for d in problem_dirs:
        definition, workloads = read_problem(d)
        problems.append((Path(d), definition, workloads))
    names = [definition["name"] for _, definition, _ in problems]
    by_problem: dict[str, list[Path]] = {n: [] for n in names}
    for sol in sols:
        owner = _solution_definition(sol)
        if owner is None:
            if len(problems) != 1:
                raise SolkitError(f"--solution {sol}: a .py solution needs exactly one PROBLEM_DIR")
            owner = names[0]
        if owner not in by_problem:
            raise SolkitError(
                f"--solution {sol}: its definition {owner!r} is none of the problems given ({', '.join(names)})"
            )
        by_problem[owner].append(sol)
    targets: list[dict] = []
    for d, definition, workloads in problems:
        uuid = None
        if wanted:
            matches = [w for w in wanted if any(str(x.get("uuid", "")).startswith(w) for x in workloads)]
            if not matches:
                raise SolkitError(f"{d}: no workload matches --workload {', '.join(wanted)}")
            uuid = matches[0]
        pick_workload(workloads, uuid, str(d))  # ambiguity and emptiness fail here, before any subprocess
        name = _slug(definition["name"])
        targets.append({"label": f"{name}.reference", "problem_dir": str(d), "workload": uuid, "solution": None})
        mine: list[Any] = (
            list(by_problem[definition["name"]])
            if given
            else sorted(d.glob("solution*.json"), key=lambda p: (p.name != "solution.json", p.name))
        )
        for sol in mine + backends:
            targets.append(
                {
                    "label": f"{name}.{solution_tag(sol, name)}",
                    "problem_dir": str(d),
                    "workload": uuid,
                    "solution": str(sol),
                }
            )
    return targets


def _solution_definition(path: Path) -> str | None:
    if path.suffix != ".json":
        return None
    try:
        return json.loads(path.read_text()).get("definition")
    except (OSError, json.JSONDecodeError) as exc:
        raise SolkitError(f"--solution {path}: not a readable solution JSON ({exc})") from exc


def solution_tag(path: Path, definition_name: str) -> str:
    """A short label for a solution: its JSON name without the definition's prefix, or the file stem."""
    if str(path).startswith("bench:"):  # a solkit bench backend, not a file
        return _slug(str(path)[len("bench:") :])
    tag = path.stem
    if path.suffix == ".json":
        with contextlib.suppress(OSError, json.JSONDecodeError):
            tag = json.loads(path.read_text()).get("name") or tag
    if tag.startswith(definition_name):
        tag = tag[len(definition_name) :].lstrip("_.-") or "solution"
    return _slug(tag)


def _subprocess_env(cpu: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    if cpu:  # Triton solutions can still run, slowly, through Triton's interpreter
        env.setdefault("TRITON_INTERPRET", "1")
    src = str(Path(solkit.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    return env


def _run_driver(spec: dict, workdir: Path, name: str, timeout_s: float) -> tuple[dict | None, str]:
    spec_path, result_path = workdir / f"{name}_spec.json", workdir / f"{name}_result.json"
    spec_path.write_text(json.dumps(spec))
    result_path.unlink(missing_ok=True)  # never read a previous run's result
    argv = [sys.executable, "-m", "solkit.profile.driver", str(spec_path), str(result_path)]
    try:
        env = _subprocess_env(cpu=spec.get("device") == "cpu")
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
        log = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        return None, f"the {name} run timed out after {timeout_s:.0f} s"
    (workdir / f"{name}_log.txt").write_text(log)
    if result_path.exists():
        return json.loads(result_path.read_text()), log
    tail = log.strip().splitlines()[-1:] or ["no output"]
    return None, f"the {name} run failed: {tail[0][:200]}"


def _gpu_info() -> dict[str, Any]:
    try:
        import torch

        if not torch.cuda.is_available():
            return {"available": False}
        p = torch.cuda.get_device_properties(0)
        return {
            "available": True,
            "name": p.name,
            "sm_count": p.multi_processor_count,
            "l2_bytes": getattr(p, "L2_cache_size", None),
            "cuda": torch.version.cuda,
            "torch": torch.__version__,
        }
    except Exception as exc:
        return {"available": False, "error": str(exc)}


def _ceilings() -> tuple[Any | None, Any | None, str | None]:
    """(spec, calibrated-or-None, why-no-spec). Calibrated only from the cache: never calibrate here."""
    try:
        from solkit.sol.ceilings import get_ceilings

        spec = get_ceilings(basis="spec")
    except Exception as exc:
        return None, None, f"no ceilings for this device ({type(exc).__name__}: {exc}); SOL fractions skipped"
    calibrated = None
    try:
        from solkit.hardware.calibrate import load_cached

        if load_cached() is not None:
            from solkit.sol.ceilings import calibrated_ceilings

            calibrated = calibrated_ceilings(quick=True)
    except Exception:  # no cache, or an older cache format: the spec basis alone is still correct
        calibrated = None
    return spec, calibrated, None


def profile(
    problem_dirs: list[str | Path],
    *,
    solution: str | Path | None = None,
    workload: str | None = None,
    out_dir: str | Path | None = None,
    use_ncu: bool = True,
    timeout_s: float = 900,
    targets: list[dict] | None = None,
    timing: bool = True,
    t_measured_ms: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Run the whole pipeline; returns the report dict (see docs/profile.md).

    ``timing=False`` skips the plain timing run (no torch.profiler list, no telemetry): the caller
    supplies T_measured per target label in ``t_measured_ms`` (as ``solkit bench`` does).
    """
    # Long on purpose: the two subprocess passes (timing, then ncu) and the merge of their results, in order.
    targets = targets or plan_targets(problem_dirs, solution, workload)
    work = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="solkit_profile_"))
    work.mkdir(parents=True, exist_ok=True)
    gpu = _gpu_info()
    degraded: list[str] = []
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "solkit_version": solkit.__version__,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu,
        "work_dir": str(work),
        "degraded": degraded,
    }
    device = "cuda" if gpu.get("available") else "cpu"
    if device == "cpu":
        degraded.append(
            "no CUDA GPU: hardware counters, NVML telemetry and GPU timing need an NVIDIA GPU; "
            "showing the work model and a CPU op list for small workloads"
        )

    if timing:
        timed, log = _run_driver({"mode": "time", "device": device, "targets": targets}, work, "time", timeout_s)
        if timed is None:
            degraded.append(log)
    else:
        timed = None

    kernels: list[ncu_parse.KernelMetrics] = []
    ncu_info: dict[str, Any] = {"used": False}
    if use_ncu and device == "cuda":
        exe = ncu_mod.find_ncu()
        if exe is None:
            degraded.append(f"ncu not found (PATH, $SOLKIT_NCU): {AFTER_DEGRADE}")
        else:
            spec = {"mode": "ncu", "device": device, "warmup": 3, "targets": targets}
            spec_path, result_path = work / "ncu_spec.json", work / "ncu_result.json"
            spec_path.write_text(json.dumps(spec))
            result_path.unlink(missing_ok=True)
            argv = [sys.executable, "-m", "solkit.profile.driver", str(spec_path), str(result_path)]
            run = ncu_mod.run_ncu(argv, work, timeout_s=timeout_s, env=_subprocess_env(), ncu=exe)
            kernels = run.kernels
            ncu_info = {
                "used": True,
                "version": run.version,
                "command": " ".join(run.command),
                "parser": run.parser,
                "n_kernels": len(kernels),
                "missing_metrics": run.missing_metrics,
                "error": run.error.to_dict() if run.error else None,
            }
            if run.error and not kernels:
                degraded.append(f"{run.error.message}: {AFTER_DEGRADE}")
            _attribute_missing(kernels, timed, targets)
    elif use_ncu:
        ncu_info["reason"] = "no GPU"
        if ncu_mod.find_ncu() is None:
            degraded.append("ncu not found (PATH, $SOLKIT_NCU): per-kernel counters skipped")
    report["ncu"] = ncu_info
    under_ncu = _read_json(work / "ncu_result.json") if ncu_info.get("used") else None
    if timed is None and under_ncu is None and not timing:  # no ncu result: the work model alone
        timed, _ = _run_driver({"mode": "model", "device": device, "targets": targets}, work, "model", timeout_s)
    if timed is None:  # no timing run (or it failed): the ncu run's driver result still has the models
        timed = under_ncu or {"targets": [{"label": t["label"], "ok": False, "error": "not run"} for t in targets]}
    report["versions"] = timed.get("versions", {})
    ncu_errors = {t["label"]: t.get("error") for t in (under_ncu or {}).get("targets", []) if not t.get("ok")}

    ceilings, calibrated, why = _ceilings() if device == "cuda" else (None, None, None)
    if why:
        degraded.append(why)
    assemble(report, targets, timed, kernels, ceilings, calibrated, ncu_errors, t_measured_ms)
    return report


def assemble(
    report: dict[str, Any],
    targets: list[dict],
    timed: dict[str, Any],
    kernels: list[ncu_parse.KernelMetrics],
    ceilings: Any | None,
    calibrated: Any | None = None,
    ncu_errors: dict[str, str] | None = None,
    t_measured_ms: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Diagnose every target from the runs' outputs and fill ``report["targets"]``."""
    gpu = report.get("gpu") or {}
    on_gpu = bool(gpu.get("available"))
    report["ceilings"] = ceilings.to_dict() if ceilings is not None else None
    report["ceilings_calibrated"] = calibrated.to_dict() if calibrated is not None else None
    report["targets"] = []
    by_label = {t.get("label"): t for t in timed.get("targets", [])}
    for t_spec in targets:
        t = by_label.get(t_spec["label"], {"label": t_spec["label"], "ok": False, "error": "not run"})
        mine = [k for k in kernels if k.target == t_spec["label"]]
        timing = t.get("timing") or {}
        t_meas = (t_measured_ms or {}).get(t_spec["label"]) or timing.get("median_ms")
        keys = ("label", "problem", "workload", "kind", "solution", "ok", "error", "notes", "model_precision")
        entry = {k: t.get(k) for k in keys}
        if t_spec["label"] in (ncu_errors or {}):
            entry["ncu_error"] = ncu_errors[t_spec["label"]]
        entry["timing"] = timing or None
        entry["telemetry"] = t.get("telemetry")
        entry["torch_kernels"] = t.get("kernels", [])
        t_s = t_meas / 1e3 if (t_meas and on_gpu) else None
        entry["diagnosis"] = diagnose_target(
            mine,
            model_bytes=t.get("model_bytes"),
            model_flops=t.get("model_flops"),
            model_unfused_bytes=t.get("model_unfused_bytes"),
            t_measured_s=t_s,
            ceilings=ceilings,
            sm_count=gpu.get("sm_count"),
            telemetry=t.get("telemetry"),
        )
        if calibrated is not None:
            entry["diagnosis"]["sol_calibrated"] = sol_block(
                t.get("model_flops"), t.get("model_bytes"), t_s, calibrated
            )
        report["targets"].append(entry)
    unattributed = [k.name for k in kernels if k.target is None]
    if unattributed:
        report["unattributed_kernels"] = unattributed
    return report


def rebuild(work_dir: str | Path) -> dict[str, Any]:
    """Re-diagnose a finished profile from the files it left in its work directory (the driver
    results, ``ncu_raw.csv``, the previous ``profile.json``), with no GPU: for analysing on a laptop
    what a GPU box recorded, or re-reading old runs with newer rules."""
    work = Path(work_dir)
    spec = _read_json(work / "time_spec.json") or _read_json(work / "ncu_spec.json")
    if spec is None:
        raise SolkitError(f"{work}: no time_spec.json or ncu_spec.json; not a solkit profile work directory")
    previous = _read_json(work / "profile.json") or {}
    timed = _read_json(work / "time_result.json") or _read_json(work / "ncu_result.json") or {"targets": []}
    _fill_unfused(timed, spec["targets"])
    kernels: list[ncu_parse.KernelMetrics] = []
    raw = work / "ncu_raw.csv"
    if raw.exists():
        kernels = ncu_mod.parse_csv(raw.read_text())
        _attribute_missing(kernels, timed, spec["targets"])
    gpu = previous.get("gpu") or {"available": bool(kernels)}
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "solkit_version": solkit.__version__,
        "created_utc": previous.get("created_utc"),
        "rebuilt_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu,
        "work_dir": str(work),
        "degraded": list(previous.get("degraded", [])),
        "versions": timed.get("versions", previous.get("versions", {})),
        "ncu": previous.get("ncu", {"used": bool(kernels)}),
    }
    ceilings = None
    if gpu.get("name"):
        from solkit.hardware.specs import match_spec
        from solkit.sol.ceilings import spec_ceilings

        arch = match_spec(gpu["name"], gpu.get("sm_count"))
        ceilings = spec_ceilings(arch.id) if arch is not None else None
    return assemble(report, spec["targets"], timed, kernels, ceilings)


def _fill_unfused(timed: dict[str, Any], targets: list[dict]) -> None:
    """Runs recorded before the op-by-op byte model existed: add it (meta tensors, no GPU) when the
    problem directory is still there. Recorded values are never replaced."""
    where = {t["label"]: t for t in targets}
    for entry in timed.get("targets", []):
        t = where.get(entry.get("label"))
        if t is None or entry.get("model_unfused_bytes") or not Path(t["problem_dir"]).is_dir():
            continue
        try:
            from solkit.problems.loader import load_problem
            from solkit.sol.analysis import analyze_workload

            problem = load_problem(t["problem_dir"])
            wl = next(w for w in problem.workloads if w.uuid == entry.get("workload"))
            entry["model_unfused_bytes"] = float(analyze_workload(problem, wl).analysis.unfused_bytes)
        except Exception:  # a moved problem or an older analysis: the report just lacks this line
            continue


def _attribute_missing(kernels: list[ncu_parse.KernelMetrics], timed: dict | None, targets: list[dict]) -> None:
    """Kernels without an NVTX name: by launch order and the timing run's per-call kernel counts."""
    if not kernels or any(k.target for k in kernels):
        return
    counts = []
    for t in (timed or {}).get("targets", []):
        n = sum(round(r["count_per_call"]) for r in t.get("kernels", []) if not _is_copy(r["name"]))
        counts.append((t["label"], int(n)))
    if not ncu_parse.attribute_by_order(kernels, counts) and len(targets) == 1:
        for k in kernels:
            k.target = targets[0]["label"]


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _is_copy(name: str) -> bool:
    return name.lower().startswith(("memcpy", "memset"))
