"""Nsight Compute (ncu) as a subprocess: the command line, the run, and the errors it reports.

ncu replays each kernel several times to read its counters, with caches flushed and (by default)
clocks locked to base. Its durations are therefore *profiler* durations: solkit keeps the harness's
time as T_measured and uses ncu only to explain it. We always pass ``--clock-control none`` (never
touch the clocks; the kernel runs at whatever the card gives it, which we record).

The profiled program starts with profiling off (``--profile-from-start off``); the driver turns it
on with ``cudaProfilerStart`` around the measured calls only, after warm-up, and names each target
with an NVTX range ``solkit:<label>`` so kernels can be attributed (``--nvtx``).

Output is written to a ``.ncu-rep`` file and exported with ``ncu -i FILE --csv --page raw
--print-units base``: one row per kernel, one column per metric, a units row under the header.
The parsing is :mod:`solkit.profile.ncu_parse`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from solkit.profile.ncu_parse import (
    CORE_METRICS,
    METRICS,
    KernelMetrics,
    NcuParseError,
    load_with_ncu_report,
    parse_csv,
)


@dataclass
class NcuError:
    """Why ncu gave no counters, in one line, with the kind for programmatic checks."""

    kind: str  # no_ncu | no_permission | profiler_unavailable | no_kernels | timeout | app_error | ncu_error
    message: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def find_ncu() -> str | None:
    """The ncu executable: $SOLKIT_NCU, then PATH, then the usual install folders."""
    env = os.environ.get("SOLKIT_NCU")
    if env:
        return env if (os.path.isfile(env) and os.access(env, os.X_OK)) else None
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in (
        "/opt/nvidia/nsight-compute/*/ncu",
        "/usr/local/cuda*/bin/ncu",
        "/usr/local/cuda/nsight-compute*/ncu",
    ):
        hits = sorted(Path("/").glob(pattern.lstrip("/")), reverse=True)
        for hit in hits:
            if os.access(hit, os.X_OK):
                return str(hit)
    return None


def ncu_version(ncu: str, timeout: float = 30) -> str | None:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"Version\s+([\w.\-() ]+)", out.stdout)
    return m.group(1).strip() if m else (out.stdout.strip().splitlines() or [None])[-1]


def build_command(
    ncu: str,
    target_argv: list[str],
    report_path: str | Path,
    metrics: dict[str, str] | None = None,
    *,
    profile_from_start: bool = False,
    nvtx: bool = True,
    launch_skip: int | None = None,
    launch_count: int | None = None,
    kernel_regex: str | None = None,
) -> list[str]:
    """The ncu command line. Always ``--clock-control none``; profiling starts at cudaProfilerStart."""
    metric_names = list(dict.fromkeys((metrics or METRICS).values()))
    cmd = [
        ncu,
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "--metrics",
        ",".join(metric_names),
        "--export",
        str(report_path),
        "--force-overwrite",
    ]
    if not profile_from_start:
        cmd += ["--profile-from-start", "off"]
    if nvtx:
        cmd += ["--nvtx"]
    if kernel_regex:
        cmd += ["--kernel-name", f"regex:{kernel_regex}"]
    if launch_skip:
        cmd += ["--launch-skip", str(launch_skip)]
    if launch_count:
        cmd += ["--launch-count", str(launch_count)]
    return cmd + list(target_argv)


def export_command(ncu: str, report_path: str | Path) -> list[str]:
    """Re-export a saved report as the raw CSV page with base units (no GPU needed)."""
    return [ncu, "--import", str(report_path), "--csv", "--page", "raw", "--print-units", "base"]


def classify_error(text: str, returncode: int | None = None) -> NcuError | None:
    """Recognise ncu's failure modes in its combined output; None when nothing is wrong."""
    t = text or ""
    if "ERR_NVGPUCTRPERM" in t:
        return NcuError(
            "no_permission",
            "ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM): run as root or with "
            "CAP_PERFMON/CAP_SYS_ADMIN, or load the driver with NVreg_RestrictProfilingToAdminUsers=0",
        )
    if "LibraryNotLoaded" in t or "Failed to initialize the profiler" in t or "Failed to load" in t:
        return NcuError(
            "profiler_unavailable",
            "the Nsight Compute profiler library did not load (LibraryNotLoaded; typical in gVisor-like "
            "sandboxes): hardware counters unavailable here",
        )
    if re.search(r"No kernels were profiled", t):
        return NcuError("no_kernels", "ncu ran but profiled no kernel (the target launched none in the range)")
    if re.search(r"==ERROR==\s+The application returned an error code", t):
        line = next((ln for ln in t.splitlines() if "Traceback" in ln or "Error" in ln), "")
        return NcuError("app_error", f"the profiled program failed under ncu: {line.strip()[:200]}")
    err = next((ln for ln in t.splitlines() if ln.startswith("==ERROR==")), None)
    if err:
        return NcuError("ncu_error", err.replace("==ERROR==", "ncu error:").strip()[:300])
    if returncode not in (None, 0):
        return NcuError("ncu_error", f"ncu exited with code {returncode}")
    return None


@dataclass
class NcuRun:
    command: list[str]
    returncode: int | None
    output: str  # stdout + stderr of the profiled run
    csv_text: str | None
    kernels: list[KernelMetrics]
    error: NcuError | None
    version: str | None
    parser: str = "csv"
    missing_metrics: list[str] = field(default_factory=list)


def run_ncu(
    target_argv: list[str],
    workdir: str | Path,
    *,
    metrics: dict[str, str] | None = None,
    timeout_s: float = 900,
    env: dict[str, str] | None = None,
    ncu: str | None = None,
    **command_options: Any,
) -> NcuRun:
    """Profile ``target_argv`` under ncu; parse the kernels; never raise for ncu's own failures."""
    ncu = ncu or find_ncu()
    if not ncu:
        return NcuRun([], None, "", None, [], NcuError("no_ncu", "ncu not found (PATH, $SOLKIT_NCU)"), None)
    first = _run_ncu_once(target_argv, workdir, metrics, timeout_s, env, ncu, command_options)
    if not first.kernels and first.error and first.error.kind == "ncu_error" and "metric" in first.output.lower():
        # An ncu that rejects one of the metric names: retry once with the core Speed-of-Light set.
        core = {k: v for k, v in (metrics or METRICS).items() if k in CORE_METRICS or k.endswith("_pct")}
        retry = _run_ncu_once(target_argv, workdir, core, timeout_s, env, ncu, command_options)
        retry.output = first.output + "\n--- retried with the core metric set ---\n" + retry.output
        return retry
    return first


def _run_ncu_once(
    target_argv: list[str],
    workdir: str | Path,
    metrics: dict[str, str] | None,
    timeout_s: float,
    env: dict[str, str] | None,
    ncu: str,
    command_options: dict[str, Any],
) -> NcuRun:
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    report = workdir / "profile.ncu-rep"
    report.unlink(missing_ok=True)  # never parse a previous run's report
    cmd = build_command(ncu, target_argv, report, metrics, **command_options)
    version = ncu_version(ncu)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        output, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        output = "".join(
            part.decode(errors="replace") if isinstance(part, bytes) else str(part)
            for part in (exc.stdout, exc.stderr)
            if part
        )
        (workdir / "ncu_output.txt").write_text(output)
        return NcuRun(
            cmd, None, output, None, [], NcuError("timeout", f"ncu timed out after {timeout_s:.0f} s"), version
        )
    (workdir / "ncu_output.txt").write_text(output)
    error = classify_error(output, None)  # ncu's exit code mirrors the app's; look at the text first
    csv_text = None
    kernels: list[KernelMetrics] = []
    parser = "csv"
    if report.exists():
        exp = subprocess.run(export_command(ncu, report), capture_output=True, text=True, timeout=300)
        csv_text = exp.stdout
        (workdir / "ncu_raw.csv").write_text(csv_text)
        try:
            kernels = parse_csv(csv_text, metrics)
        except NcuParseError as exc:
            kernels, parser = load_with_ncu_report(report, ncu, metrics), "ncu_report"
            if not kernels:
                error = error or NcuError("ncu_error", f"could not parse ncu's CSV: {exc}")
    if kernels and not any(k.target for k in kernels):
        # The CSV export had no NVTX columns: ncu_report (when importable) reads the ranges directly.
        via_report = load_with_ncu_report(report, ncu, metrics)
        if len(via_report) == len(kernels):
            for k, r in zip(kernels, via_report):
                k.target = r.target
    if kernels and error and error.kind in ("app_error", "ncu_error"):
        error = None if rc == 0 else error  # kernels came back: a late app error must not hide them
    if not kernels and error is None:
        error = classify_error(output, rc) or NcuError("no_kernels", "ncu returned no kernel rows")
    missing = sorted({k for km in kernels for k, v in km.metrics.items() if v is None})
    return NcuRun(cmd, rc, output, csv_text, kernels, error, version, parser, missing)
