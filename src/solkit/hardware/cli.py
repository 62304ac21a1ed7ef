"""``solkit hw list|show|detect`` and ``solkit calibrate``.

``hw show`` prints the product's record and its compute capability's limits; floors above the hardware add
their own sections (which path each kernel takes there) through :func:`add_show_section`, so this module never
imports them: the top-level CLI registers those sections.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from solkit.output import console, print_json, table, warn


@dataclass
class ShowSection:
    """One extra section of ``solkit hw show``: a table for people and a value for ``--json``."""

    key: str  # the key of ``data`` in the JSON record
    title: str
    columns: list[str]
    rows: list[list[Any]]
    data: Any
    caption: str | None = None
    notes: list[str] = field(default_factory=list)


#: Providers of extra ``hw show`` sections, by name; each takes a product id and returns a section or None.
SHOW_SECTIONS: dict[str, Callable[[str], ShowSection | None]] = {}


def add_show_section(name: str, provider: Callable[[str], ShowSection | None]) -> None:
    """Register (or replace) an extra ``hw show`` section: how a floor above the hardware adds what it knows."""
    SHOW_SECTIONS[name] = provider


def register(sub: argparse._SubParsersAction) -> None:
    hw = sub.add_parser("hw", help="the hardware database and device detection")
    hw_sub = hw.add_subparsers(dest="hw_command", metavar="ACTION", required=True, parser_class=type(hw))
    p = hw_sub.add_parser("list", help="list every known product")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_list)
    p = hw_sub.add_parser(
        "show", help="one product's record with the source of every value, its per-SM limits and kernel paths"
    )
    p.add_argument("id", help="arch id, e.g. h200-sxm (see `solkit hw list`)")
    p.add_argument(
        "--paths",
        action="store_true",
        help="also the path each public kernel takes on the product (imports torch and the kernels: ~2 s)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)
    p = hw_sub.add_parser("detect", help="detect the present device and match it to a record")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_detect)

    p = sub.add_parser("calibrate", help="measure the ceilings this device really reaches (cached)")
    p.add_argument("--recalibrate", action="store_true", help="ignore the cache and measure again")
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_calibrate)


def _peak_cols(spec) -> dict[str, Any]:
    return {u: s.value for u, s in spec.peaks_tflops.items()}


def cmd_list(args: argparse.Namespace) -> int:
    from solkit.hardware.specs import list_specs

    specs = list_specs()
    if args.json:
        print_json([_record_json(s, with_sources=False) for s in specs])
        return 0
    rows = []
    for s in specs:
        p = _peak_cols(s)
        rows.append([
            s.id, s.name, int(s.sm_count.value), s.memory_bandwidth_gbs.value / 1e3, p.get("bf16_tensor"),
            p.get("fp8_tensor"), p.get("fp32_vector"), s.memory_bytes.value / 1e9,
        ])  # fmt: skip
    console.print(
        table(
            "solkit hardware database (dense peaks)",
            ["id", "name", "SMs/CUs", "TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp32 TFLOP/s", "memory GB"],
            rows,
        )
    )
    return 0


def _record_json(spec, with_sources: bool = True) -> dict[str, Any]:
    from solkit.hardware.specs import load_db

    sources = load_db().sources

    def field(sourced, scale: float = 1.0) -> dict[str, Any]:
        d: dict[str, Any] = {"value": sourced.value * scale, "kind": sourced.kind, "source": sourced.source}
        if sourced.note:
            d["note"] = sourced.note
        if with_sources and sourced.source in sources:
            d["url"] = sources[sourced.source].url
        return d

    return {
        "id": spec.id,
        "vendor": spec.vendor,
        "name": spec.name,
        "family": spec.family,
        "compute_capability": spec.compute_capability,
        "sm_count": field(spec.sm_count),
        "boost_clock_mhz": field(spec.boost_clock_mhz),
        "memory_bytes": field(spec.memory_bytes),
        "memory_bandwidth_tbs": field(spec.memory_bandwidth_gbs, 1e-3),
        "memory_bandwidth_bytes_per_s": spec.bandwidth,
        "l2_bytes": field(spec.l2_bytes),
        "peaks_tflops": {u: field(s) for u, s in spec.peaks_tflops.items()},
        "dense": True,
    }


def cc_limits_json(spec) -> dict[str, Any] | None:
    """The per-compute-capability limits and features of a product (None when the database has none)."""
    from solkit.hardware.specs import cc_limits

    lim = cc_limits(spec.compute_capability) if spec.vendor == "nvidia" else None
    if lim is None:
        return None
    return {
        name: {"value": s.value, "kind": s.kind, "source": s.source, **({"note": s.note} if s.note else {})}
        for name, s in ((n, getattr(lim, n)) for n in type(lim).model_fields)
    }


_LIMIT_LABELS = {
    "smem_per_sm_bytes": ("shared memory per SM", "B"),
    "smem_per_block_bytes": ("shared memory per block (opt-in)", "B"),
    "regs_per_sm": ("registers per SM", "32-bit"),
    "max_regs_per_thread": ("registers per thread", "max"),
    "tma": ("TMA", ""),
    "wgmma": ("wgmma", ""),
    "gluon_hopper": ("Gluon Hopper ops", ""),
}


def show_sections(product_id: str) -> list[ShowSection]:
    """The extra sections registered for ``hw show``; a provider that fails gives a one-line note instead."""
    out = []
    for name, provider in SHOW_SECTIONS.items():
        try:
            section = provider(product_id)
        except Exception as exc:  # noqa: BLE001 - one section must never hide the record
            section = ShowSection(name, name, [], [], {"error": f"{type(exc).__name__}: {exc}"},
                                  notes=[f"{name}: not available ({type(exc).__name__}: {exc})"])  # fmt: skip
        if section is not None:
            out.append(section)
    return out


def cmd_show(args: argparse.Namespace) -> int:
    from solkit.hardware.specs import get_spec, load_db

    spec = get_spec(args.id)
    limits = cc_limits_json(spec)
    # The extra sections import the kernels (torch, Triton): only on request, so `hw show` starts in a blink.
    sections = show_sections(spec.id) if getattr(args, "paths", False) else []
    if args.json:
        print_json({**_record_json(spec), "cc_limits": limits, **{s.key: s.data for s in sections}})
        return 0
    sources = load_db().sources
    rows = []
    for label, s, unit in [
        ("SMs / CUs", spec.sm_count, ""),
        ("boost clock", spec.boost_clock_mhz, "MHz"),
        ("memory", spec.memory_bytes, "B"),
        ("bandwidth", spec.memory_bandwidth_gbs, "GB/s"),
        ("L2", spec.l2_bytes, "B"),
    ] + [(f"{u} (dense)", s, "TFLOP/s" if u != "int8_tensor" else "TOPS") for u, s in spec.peaks_tflops.items()]:
        rows.append([label, s.value, unit, s.kind, s.note or "", sources[s.source].url])
    console.print(
        table(
            f"{spec.name} ({spec.id}, CC {spec.compute_capability})",
            ["field", "value", "unit", "kind", "note", "source"],
            rows,
        )
    )
    if limits:
        lim_rows = [[_LIMIT_LABELS[k][0], v["value"], _LIMIT_LABELS[k][1], v["kind"], v.get("note", ""),
                     sources[v["source"]].url] for k, v in limits.items()]  # fmt: skip
        console.print(table(f"compute capability {spec.compute_capability}: per-SM limits and features",
                            ["limit", "value", "unit", "kind", "note", "source"], lim_rows))  # fmt: skip
    for s in sections:
        if s.rows:
            console.print(table(s.title, s.columns, s.rows, caption=s.caption))
        for n in s.notes:
            console.print(f"note: {n}")
    if not getattr(args, "paths", False) and SHOW_SECTIONS:
        console.print(f"each kernel's path on {spec.id}: `solkit hw show {spec.id} --paths`")
    return 0


def cmd_detect(args: argparse.Namespace) -> int:
    from solkit.hardware.detect import detect_device

    info = detect_device()
    for w in info.warnings:
        warn(w)
    if args.json:
        print_json(info.to_dict())
        return 0
    rows = [[k, v] for k, v in info.to_dict().items() if k != "warnings" and v is not None]
    console.print(table("detected device", ["property", "value"], rows))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from solkit.hardware.calibrate import get_calibration, to_json

    if args.json:
        cal = get_calibration(recalibrate=args.recalibrate, quick=args.quick)
    else:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console) as p:
            task = p.add_task("calibrating", total=None)
            cal = get_calibration(
                recalibrate=args.recalibrate, quick=args.quick, progress=lambda m: p.update(task, description=m)
            )
    for w in cal.warnings:
        warn(w)
    if args.json:
        print_json(to_json(cal))
        return 0
    print_calibration(cal)
    return 0


def print_calibration(cal) -> None:
    from solkit.hardware.specs import get_spec

    arch = cal.device.get("arch_id")
    spec = get_spec(arch) if arch else None
    rows = []
    for name, c in cal.bandwidth.items():
        sheet = spec.bandwidth if spec else None
        rows.append([f"bandwidth {name}", c.value / 1e12, "TB/s", c.burst and c.burst / 1e12, None,
                     sheet and c.value / sheet, c.size])  # fmt: skip
    from solkit.hardware.calibrate import GEMM_UNITS

    for name, c in cal.gemm.items():
        sheet = spec.peaks_tflops.get(GEMM_UNITS[name]) if spec else None
        rows.append([f"gemm {name}", c.value / 1e12, "TFLOP/s", c.burst and c.burst / 1e12,
                     c.sustained and c.sustained / 1e12, sheet and c.value / (sheet.value * 1e12), c.size])  # fmt: skip
    console.print(
        table(
            f"calibration: {cal.device.get('name')} ({arch or 'not in database'}), {cal.timestamp}"
            + (" [quick]" if cal.quick else ""),
            ["ceiling", "median", "unit", "burst (p90)", "sustained", "of datasheet", "size"],
            rows,
            caption=f"measured in {cal.duration_s:.1f} s; cached; `solkit calibrate --recalibrate` to refresh",
        )
    )
