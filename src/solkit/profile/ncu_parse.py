"""Parsing Nsight Compute's output into :class:`KernelMetrics`: the metric list solkit asks for, the CSV
export (raw page or the long "details" layout) and, when the CSV is unusable, NVIDIA's ``ncu_report``
Python module.

:func:`parse_csv` follows the rules in docs/profile.md (csv.reader, columns by name, thousands
separators, ``n/a``, ``==PROF==`` lines, several kernels, the long "details" layout too).
"""

from __future__ import annotations

import csv
import io
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: The fixed metric list: short name -> ncu metric. Unknown metrics are silently dropped by ncu on
#: some chips, so the parser records which ones came back.
METRICS: dict[str, str] = {
    # ncu's "GPU Speed Of Light Throughput" section figures
    "duration_ns": "gpu__time_duration.sum",
    "sm_throughput_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "memory_throughput_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_throughput_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1_throughput_pct": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "l2_throughput_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_clock_hz": "sm__cycles_elapsed.avg.per_second",
    "dram_clock_hz": "dram__cycles_elapsed.avg.per_second",
    "elapsed_cycles": "gpc__cycles_elapsed.max",
    # memory traffic
    "dram_bytes_read": "dram__bytes_read.sum",
    "dram_bytes_write": "dram__bytes_write.sum",
    "l2_bytes": "lts__t_bytes.sum",
    "l2_hit_rate_pct": "lts__t_sector_hit_rate.pct",
    "l1_hit_rate_pct": "l1tex__t_sector_hit_rate.pct",
    "local_load_sectors": "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
    "local_store_sectors": "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
    "global_load_bytes_per_sector_pct": "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
    # occupancy and pipes
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "tensor_pipe_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    # executed math (instruction counts, per thread)
    "fp32_fadd": "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "fp32_fmul": "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "fp32_ffma": "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "fp16_hadd": "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "fp16_hmul": "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "fp16_hfma": "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
    "tensor_ops_bf16": "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    "tensor_ops_fp16": "sm__ops_path_tensor_src_fp16.sum",
    "tensor_ops_tf32": "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
    "tensor_ops_fp8": "sm__ops_path_tensor_src_fp8.sum",
    # launch configuration (no replay needed)
    "registers_per_thread": "launch__registers_per_thread",
    "smem_static_bytes": "launch__shared_mem_per_block_static",
    "smem_dynamic_bytes": "launch__shared_mem_per_block_dynamic",
    "block_size": "launch__block_size",
    "grid_size": "launch__grid_size",
    "waves_per_sm": "launch__waves_per_multiprocessor",
    "occupancy_limit_registers": "launch__occupancy_limit_registers",
    "occupancy_limit_shared_mem": "launch__occupancy_limit_shared_mem",
    "occupancy_limit_warps": "launch__occupancy_limit_warps",
    "occupancy_limit_blocks": "launch__occupancy_limit_blocks",
}
#: Metrics whose absence makes a kernel row useless for diagnosis.
CORE_METRICS = ("duration_ns", "sm_throughput_pct", "dram_throughput_pct", "dram_bytes_read", "dram_bytes_write")

#: Leading, non-metric columns of the raw page (ncu 2023-2025).
ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Device", "CC")

NVTX_PREFIX = "solkit:"


@dataclass
class KernelMetrics:
    """One profiled kernel launch: identification, metric values (by short name) and units."""

    id: int
    name: str
    metrics: dict[str, float | None]
    units: dict[str, str] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)  # every other column, verbatim (NVTX, grid, ...)
    target: str | None = None  # the solkit:<label> NVTX range it ran in, when known

    def get(self, key: str) -> float | None:
        return self.metrics.get(key)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("raw")
        d["missing"] = [k for k, v in self.metrics.items() if v is None]
        return d


class NcuParseError(ValueError):
    pass


def parse_number(text: str | None) -> float | None:
    """'1,073,755,904' -> 1073755904.0; '' / 'n/a' / '--' -> None; '(!) 12.5' -> 12.5."""
    if text is None:
        return None
    t = text.strip().replace(",", "").replace("\u202f", "").replace("(!)", "").strip()
    if t in ("", "n/a", "N/A", "--", "-", "nan", "NaN"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


#: Scale factors for the units ncu prints when base units were not requested.
_UNIT_SCALE = {
    "ns": 1.0,
    "us": 1e3,
    "ms": 1e6,
    "s": 1e9,
    "nsecond": 1.0,
    "usecond": 1e3,
    "msecond": 1e6,
    "second": 1e9,
    "byte": 1.0,
    "kbyte": 1e3,
    "mbyte": 1e6,
    "gbyte": 1e9,
    "tbyte": 1e12,
    "kibyte": 1024.0,
    "mibyte": 1024.0**2,
    "gibyte": 1024.0**3,
    "hz": 1.0,
    "khz": 1e3,
    "mhz": 1e6,
    "ghz": 1e9,
    "cycle/nsecond": 1e9,
    "cycle/usecond": 1e6,
    "cycle/second": 1.0,
}
#: The base unit each short metric is reported in after normalisation.
_BASE_UNIT = {"duration_ns": "nsecond", "sm_clock_hz": "hz", "dram_clock_hz": "hz"}


def _normalise(short: str, value: float | None, unit: str) -> tuple[float | None, str]:
    """Scale auto-ranged units (``ms``, ``Gbyte``, ``Kbyte/block``, ``Ghz``) to base units."""
    if value is None:
        return None, unit
    u = unit.strip().lower()
    if short.endswith("_bytes") and u.endswith("/block"):
        u = u[: -len("/block")]
    if short == "duration_ns" and u in _UNIT_SCALE:
        return value * _UNIT_SCALE[u], "nsecond"
    if short.endswith("_hz") and u in _UNIT_SCALE:
        return value * _UNIT_SCALE[u], "hz"
    if ("bytes" in short or short.endswith("_bytes")) and u in _UNIT_SCALE and "byte" in u:
        return value * _UNIT_SCALE[u], "byte"
    return value, unit


def _clean_lines(text: str) -> list[str]:
    """Drop ncu's ==PROF==/==WARNING== lines and anything before the header row."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("==")]
    for i, ln in enumerate(lines):
        if ln.startswith('"ID"') or ln.startswith("ID,"):
            return lines[i:]
    raise NcuParseError("no CSV header row starting with ID")


def parse_csv(text: str, metrics: dict[str, str] | None = None) -> list[KernelMetrics]:
    """Parse ncu CSV (raw page, or the long details page) into one KernelMetrics per kernel launch."""
    metrics = metrics or METRICS
    rows = list(csv.reader(io.StringIO("\n".join(_clean_lines(text)))))
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:
        return _parse_details(header, rows[1:], metrics)
    col = {name: i for i, name in enumerate(header)}
    if "Kernel Name" not in col:
        raise NcuParseError("CSV header has no 'Kernel Name' column")
    body = rows[1:]
    units: list[str] = [""] * len(header)
    # The units row has an empty ID; real kernel rows always have a numeric ID.
    if body and not body[0][0].strip().isdigit():
        units = body[0] + [""] * (len(header) - len(body[0]))
        body = body[1:]
    kernels: list[KernelMetrics] = []
    for r in body:
        if not r or not r[0].strip().isdigit():
            continue
        r = r + [""] * (len(header) - len(r))
        values: dict[str, float | None] = {}
        unit_of: dict[str, str] = {}
        for short, name in metrics.items():
            i = col.get(name)
            if i is None:
                values[short] = None
                continue
            v, u = _normalise(short, parse_number(r[i]), units[i])
            values[short] = v
            if u:
                unit_of[short] = u
        metric_cols = set(metrics.values())
        raw = {h: r[i] for i, h in enumerate(header) if h not in metric_cols}
        kernels.append(
            KernelMetrics(
                id=int(r[col["ID"]]) if "ID" in col else len(kernels),
                name=r[col["Kernel Name"]],
                metrics=values,
                units=unit_of,
                raw=raw,
                target=_target_from_raw(raw),
            )
        )
    return kernels


def _parse_details(header: list[str], body: list[list[str]], metrics: dict[str, str]) -> list[KernelMetrics]:
    """The default (details) page: one row per (kernel, section, metric). Only metrics we know by
    their ncu name or by the SOL section's display names are mapped."""
    col = {name: i for i, name in enumerate(header)}
    by_name = {v: k for k, v in metrics.items()}
    display = {
        "Duration": "duration_ns",
        "Compute (SM) Throughput": "sm_throughput_pct",
        "Memory Throughput": "memory_throughput_pct",
        "DRAM Throughput": "dram_throughput_pct",
        "L1/TEX Cache Throughput": "l1_throughput_pct",
        "L2 Cache Throughput": "l2_throughput_pct",
        "Achieved Occupancy": "achieved_occupancy_pct",
        "Theoretical Occupancy": "theoretical_occupancy_pct",
        "Registers Per Thread": "registers_per_thread",
        "L2 Hit Rate": "l2_hit_rate_pct",
        "L1/TEX Hit Rate": "l1_hit_rate_pct",
        "Waves Per SM": "waves_per_sm",
    }
    kernels: dict[int, KernelMetrics] = {}
    for r in body:
        if not r or not r[0].strip().isdigit():
            continue
        kid = int(r[col["ID"]])
        km = kernels.get(kid)
        if km is None:
            raw = {h: r[i] for i, h in enumerate(header) if h not in ("Metric Name", "Metric Unit", "Metric Value")}
            km = kernels[kid] = KernelMetrics(kid, r[col["Kernel Name"]], dict.fromkeys(metrics), {}, raw)
            km.target = _target_from_raw(raw)
        mname = r[col["Metric Name"]]
        short = by_name.get(mname) or display.get(mname)
        if short is None or short not in metrics:
            continue
        v, u = _normalise(short, parse_number(r[col["Metric Value"]]), r[col.get("Metric Unit", 0)])
        if short == "duration_ns" and v is not None and u != "nsecond":
            continue
        km.metrics[short] = v
        km.units[short] = u
    return [kernels[k] for k in sorted(kernels)]


def _target_from_raw(raw: dict[str, str]) -> str | None:
    """The innermost ``solkit:<label>`` NVTX range named anywhere in the row's text columns."""
    for value in raw.values():
        if NVTX_PREFIX in value:
            m = re.findall(re.escape(NVTX_PREFIX) + r"([A-Za-z0-9_.\-]+)", value)
            if m:
                return m[-1]
    return None


def attribute_by_order(kernels: list[KernelMetrics], counts: list[tuple[str, int]]) -> bool:
    """Assign targets to kernels in launch order from per-target kernel counts (a timing pre-run's
    torch.profiler list). Used only when NVTX names are missing; returns False if counts disagree."""
    if any(k.target for k in kernels) or sum(n for _, n in counts) != len(kernels):
        return False
    i = 0
    for label, n in counts:
        for k in kernels[i : i + n]:
            k.target = label
        i += n
    return True


# --------------------------------------------------------------------------- ncu_report (optional)


#: Why the last ncu_report attempt gave nothing (for the report's ncu section).
NCU_REPORT_STATUS: dict[str, str | None] = {"error": None}


def _ncu_report_dirs(ncu: str | None) -> list[Path]:
    """Where NVIDIA installs ``extras/python/ncu_report.py``: beside the real ncu, or in the
    nsight-compute folders of a CUDA toolkit (where ``bin/ncu`` is only a launcher script)."""
    dirs: list[Path] = []
    if ncu:
        base = Path(os.path.realpath(ncu)).parent
        dirs += [base / "extras" / "python", base.parent / "extras" / "python"]
        dirs += sorted(base.parent.glob("nsight-compute*/extras/python"), reverse=True)
    for pattern in ("opt/nvidia/nsight-compute/*/extras/python", "usr/local/cuda*/nsight-compute*/extras/python"):
        dirs += sorted(Path("/").glob(pattern), reverse=True)
    return [d for d in dict.fromkeys(dirs) if (d / "ncu_report.py").exists()]


def _import_ncu_report(ncu: str | None):
    try:
        import ncu_report  # type: ignore[import-not-found]

        return ncu_report
    except ImportError:
        pass
    for cand in _ncu_report_dirs(ncu):
        sys.path.insert(0, str(cand))
        try:
            import ncu_report  # type: ignore[import-not-found]

            return ncu_report
        except ImportError as exc:
            NCU_REPORT_STATUS["error"] = f"import from {cand} failed: {exc}"
            sys.path.remove(str(cand))
    NCU_REPORT_STATUS["error"] = NCU_REPORT_STATUS["error"] or "ncu_report not found (extras/python)"
    return None


def load_with_ncu_report(report: str | Path, ncu: str | None, metrics: dict[str, str] | None = None):
    """Read a .ncu-rep through NVIDIA's ``ncu_report`` module when importable; [] otherwise."""
    metrics = metrics or METRICS
    mod = _import_ncu_report(ncu)
    if mod is None:
        return []
    try:
        ctx = mod.load_report(str(report))
        kernels: list[KernelMetrics] = []
        for ri in range(ctx.num_ranges()):
            rng = ctx.range_by_idx(ri)
            for ai in range(rng.num_actions()):
                act = rng.action_by_idx(ai)
                values: dict[str, float | None] = {}
                for short, name in metrics.items():
                    m = act.metric_by_name(name)
                    values[short] = float(m.as_double()) if m is not None else None
                km = KernelMetrics(len(kernels), act.name(), values)
                km.target = _nvtx_target(act)
                kernels.append(km)
        NCU_REPORT_STATUS["error"] = None
        return kernels
    except Exception as exc:  # an API drift in ncu_report must not lose the CSV path's answer
        NCU_REPORT_STATUS["error"] = f"{type(exc).__name__}: {exc}"
        return []


def _nvtx_target(action: Any) -> str | None:
    try:
        state = action.nvtx_state()
        for dom_id in state.domains():
            for rng in state.domain_by_id(dom_id).push_pop_ranges():
                if str(rng).startswith(NVTX_PREFIX):
                    return str(rng)[len(NVTX_PREFIX) :]
    except Exception:
        return None
    return None
