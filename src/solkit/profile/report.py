"""Render a profile report (the dict from :func:`solkit.profile.runner.profile`) as Markdown,
self-contained HTML (inline CSS, no scripts, no external assets) or JSON."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any


def _f(value: Any, digits: int = 1, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, (int, float)):
        if abs(value) >= 1e9:
            return f"{value / 1e9:.2f} G{unit}"
        if abs(value) >= 1e6:
            return f"{value / 1e6:.2f} M{unit}"
        return f"{value:.{digits}f}{(' ' + unit) if unit else ''}"
    return str(value)


def _pct(value: Any) -> str:
    return "–" if value is None else f"{value:.1f}%"


def _short(name: str, n: int = 70) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def target_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for t in report.get("targets", []):
        d = t.get("diagnosis") or {}
        sol = d.get("sol") or {}
        timing = t.get("timing") or {}
        rows.append(
            [
                t.get("label") or "?",
                _f(timing.get("median_ms"), 4),
                _f(sol.get("t_sol_ms"), 4),
                "–" if sol.get("sol_fraction") is None else f"{sol['sol_fraction']:.0%}",
                "–"
                if not (d.get("sol_calibrated") or {}).get("sol_fraction")
                else f"{d['sol_calibrated']['sol_fraction']:.0%}",
                (sol.get("tier") or {}).get("label", "–"),
                str(d.get("n_kernels", 0)),
                "–" if d.get("dram_vs_model") is None else f"{d['dram_vs_model']:.2f}×",
                d.get("summary", "") if t.get("ok", True) else f"failed: {t.get('error')}",
            ]
        )
    return rows


TARGET_COLUMNS = [
    "target",
    "T_measured ms",
    "T_SOL ms",
    "SOL (sheet)",
    "SOL (calibrated)",
    "tier",
    "kernels",
    "DRAM/model",
    "diagnosis",
]
KERNEL_COLUMNS = [
    "kernel",
    "ncu µs",
    "roof",
    "SM %",
    "mem %",
    "DRAM %",
    "DRAM bytes",
    "L2 hit",
    "occ %",
    "regs",
    "tensor %",
]


def kernel_rows(diag: dict[str, Any]) -> list[list[str]]:
    rows = []
    for k in diag.get("kernels", []):
        rows.append(
            [
                _short(k["name"]),
                _f(k["duration_us_ncu"], 1),
                k["roof"],
                _pct(k["sm_throughput_pct"]),
                _pct(k["memory_throughput_pct"]),
                _pct(k["dram_throughput_pct"]),
                _f(k["dram_bytes"], 1, "B"),
                _pct(k["l2_hit_rate_pct"]),
                _pct(k["achieved_occupancy_pct"]),
                _f(k["registers_per_thread"], 0),
                _pct(k["tensor_pipe_pct"]),
            ]
        )
    return rows


def _md_table(columns: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _findings(t: dict[str, Any]) -> list[tuple[str, str, str]]:
    d = t.get("diagnosis") or {}
    out = [(f["severity"], "target", f["message"]) for f in d.get("findings", [])]
    for k in d.get("kernels", []):
        out += [(f["severity"], _short(k["name"], 50), f["message"]) for f in k["findings"]]
    rank = {"high": 0, "medium": 1, "info": 2}
    return sorted(out, key=lambda x: rank.get(x[0], 3))


def _header_lines(report: dict[str, Any]) -> list[str]:
    gpu = report.get("gpu") or {}
    ncu = report.get("ncu") or {}
    v = report.get("versions") or {}
    lines = [
        f"- GPU: {gpu.get('name', 'none')} ({gpu.get('sm_count', '?')} SMs)" if gpu.get("available") else "- GPU: none",
        f"- versions: solkit {report.get('solkit_version')}, torch {v.get('torch', '?')}, "
        f"triton {v.get('triton', '–')}, "
        f"ncu {ncu.get('version') or '–'}",
        f"- created: {report.get('created_utc')}",
    ]
    ceil = report.get("ceilings")
    if ceil:
        lines.append(
            f"- SOL basis: {ceil['basis']} ({ceil['arch']}): {ceil['bandwidth'] / 1e12:.2f} TB/s; "
            "ncu percentages are of per-cycle peaks at the measured clock, SOL fractions of these ceilings"
        )
    lines.append(
        "- T_measured: the harness's median (CUDA events/graphs, L2 flushed); ncu µs are replay times"
        if gpu.get("available")
        else "- T_measured: the harness's median (wall clock on the CPU)"
    )
    return lines


def _telemetry_line(t: dict[str, Any]) -> str | None:
    tele = t.get("telemetry") or {}
    if not tele.get("available") or not tele.get("sm_clock_mhz"):
        return None
    clk = tele.get("sm_clock_mhz") or {}
    pw = tele.get("power_w") or {}
    s = f"SM clock median {clk.get('median', 0):.0f} MHz (min {clk.get('min', 0):.0f}), "
    s += f"power max {pw.get('max', 0):.0f} W"
    if tele.get("throttled"):
        s += f", THROTTLED ({', '.join(tele.get('throttle_reasons', []))})"
    return s


def to_markdown(report: dict[str, Any]) -> str:
    out = ["# solkit profile report", ""]
    out += _header_lines(report)
    if report.get("degraded"):
        out += ["", "**Degraded:**", ""] + [f"- {m}" for m in report["degraded"]]
    out += ["", "## Summary", "", _md_table(TARGET_COLUMNS, target_rows(report))]
    for t in report.get("targets", []):
        d = t.get("diagnosis") or {}
        out += ["", f"## {t.get('label')}", ""]
        if not t.get("ok", True):
            out += [f"Failed: `{t.get('error')}`"]
            continue
        sol = d.get("sol") or {}
        model = f"model: {_f(d.get('model_bytes'), 1, 'B')} fused bytes"
        if d.get("model_flops"):
            model += ", " + ", ".join(f"{_f(v, 1, 'FLOP')} {u}" for u, v in d["model_flops"].items())
        if d.get("model_unfused_bytes"):
            model += f" ({_f(d['model_unfused_bytes'], 1, 'B')} op by op)"
        out.append(f"- {model}; measured DRAM {_f(d.get('dram_bytes'), 1, 'B')}")
        if sol.get("t_sol_ms") is not None:
            out.append(
                f"- T_SOL {sol['t_sol_ms']:.4f} ms ({sol['bound']}-bound), T_measured {sol['t_measured_ms']:.4f} ms, "
                f"SOL {sol['sol_fraction']:.1%} → tier **{sol['tier']['label']}**: {sol['tier']['advice']}"
            )
        cal = d.get("sol_calibrated") or {}
        if cal.get("t_sol_ms") is not None:
            out.append(
                f"- calibrated basis ({cal['arch']}): T_SOL {cal['t_sol_ms']:.4f} ms, SOL {cal['sol_fraction']:.1%}"
            )
        tl = _telemetry_line(t)
        if tl:
            out.append(f"- telemetry: {tl}")
        if d.get("kernels"):
            out += ["", _md_table(KERNEL_COLUMNS, kernel_rows(d))]
        elif t.get("torch_kernels"):
            out += ["", "torch.profiler kernels (per call):", ""]
            rows = [
                [_short(r["name"]), _f(r["count_per_call"], 1), _f(r["time_us_per_call"], 1)]
                for r in t["torch_kernels"]
            ]
            out.append(_md_table(["kernel", "count", "time µs"], rows))
        fs = _findings(t)
        if fs:
            out += ["", "Findings:", ""] + [f"- **{sev}** ({where}): {msg}" for sev, where, msg in fs]
    return "\n".join(out) + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;color:#1b1b1b;max-width:1400px}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}th,td{border:1px solid #ccc;padding:3px 7px;text-align:left}
th{background:#f0f0f0}td.num{text-align:right;font-variant-numeric:tabular-nums}
.high{color:#b00020;font-weight:600}.medium{color:#a05a00}.info{color:#555}
.degraded{background:#fff4e5;border-left:4px solid #f0a020;padding:.4em .8em}
code{background:#f4f4f4;padding:0 3px}
"""


def _html_table(columns: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=num' if _is_num(c) else ''}>{html.escape(str(c))}</td>" for c in r) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_NUMERIC = re.compile(r"^[-+]?[\d.,]+(\s?(%|×|[kKMGT]?B|[kKMGT]?FLOP))?$")


def _is_num(s: Any) -> bool:
    """Right-align only cells that are a number with at most a unit, not prose starting with one."""
    return bool(_NUMERIC.match(str(s).strip()))


def to_html(report: dict[str, Any]) -> str:
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>solkit profile report</title>",
        f"<style>{_CSS}</style></head><body><h1>solkit profile report</h1><ul>",
    ]
    parts += [f"<li>{html.escape(line[2:])}</li>" for line in _header_lines(report)]
    parts.append("</ul>")
    if report.get("degraded"):
        parts.append("<div class=degraded><b>Degraded:</b><ul>")
        parts += [f"<li>{html.escape(m)}</li>" for m in report["degraded"]]
        parts.append("</ul></div>")
    parts += ["<h2>Summary</h2>", _html_table(TARGET_COLUMNS, target_rows(report))]
    for t in report.get("targets", []):
        d = t.get("diagnosis") or {}
        parts.append(f"<h2>{html.escape(str(t.get('label')))}</h2>")
        if not t.get("ok", True):
            parts.append(f"<p class=high>Failed: <code>{html.escape(str(t.get('error')))}</code></p>")
            continue
        sol = d.get("sol") or {}
        model = f"model {_f(d.get('model_bytes'), 1, 'B')} fused bytes"
        if d.get("model_flops"):
            model += ", " + ", ".join(f"{_f(v, 1, 'FLOP')} {u}" for u, v in d["model_flops"].items())
        if d.get("model_unfused_bytes"):
            model += f" ({_f(d['model_unfused_bytes'], 1, 'B')} op by op)"
        items = [f"{model}; measured DRAM {_f(d.get('dram_bytes'), 1, 'B')}"]
        if sol.get("t_sol_ms") is not None:
            items.append(
                f"T_SOL {sol['t_sol_ms']:.4f} ms ({sol['bound']}), T_measured {sol['t_measured_ms']:.4f} ms, "
                f"SOL {sol['sol_fraction']:.1%}, tier {sol['tier']['label']}: {sol['tier']['advice']}"
            )
        cal = d.get("sol_calibrated") or {}
        if cal.get("t_sol_ms") is not None:
            items.append(f"calibrated basis: T_SOL {cal['t_sol_ms']:.4f} ms, SOL {cal['sol_fraction']:.1%}")
        tl = _telemetry_line(t)
        if tl:
            items.append("telemetry: " + tl)
        parts.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>")
        if d.get("kernels"):
            parts.append(_html_table(KERNEL_COLUMNS, kernel_rows(d)))
        elif t.get("torch_kernels"):
            rows = [
                [_short(r["name"]), _f(r["count_per_call"], 1), _f(r["time_us_per_call"], 1)]
                for r in t["torch_kernels"]
            ]
            parts.append(
                "<p>torch.profiler kernels (per call):</p>" + _html_table(["kernel", "count", "time µs"], rows)
            )
        fs = _findings(t)
        if fs:
            parts.append("<ul>")
            parts += [
                f"<li class={sev}><b>{sev}</b> ({html.escape(where)}): {html.escape(msg)}</li>"
                for sev, where, msg in fs
            ]
            parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def to_json(report: dict[str, Any]) -> str:
    from solkit.output import jsonable

    return json.dumps(jsonable(report), indent=2, allow_nan=False, default=str)


def write_reports(report: dict[str, Any], out_dir: str | Path, stem: str = "profile") -> dict[str, str]:
    """Write ``<stem>.md``, ``<stem>.html`` and ``<stem>.json`` into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / f"{stem}.md", "html": out / f"{stem}.html", "json": out / f"{stem}.json"}
    paths["markdown"].write_text(to_markdown(report))
    paths["html"].write_text(to_html(report))
    paths["json"].write_text(to_json(report))
    return {k: str(v) for k, v in paths.items()}
