"""Tables, Markdown and HTML for a ``train-bench`` summary (see :func:`solkit.train.runner.summarise`)."""

from __future__ import annotations

import html
from typing import Any

COLUMNS = [
    "variant",
    "status",
    "swaps",
    "tok/s",
    "step ms (p10–p90)",
    "MFU palm sheet",
    "MFU palm calib",
    "MFU megatron sheet",
    "peak alloc GiB",
    "peak reserved GiB",
    "final loss",
    "parity",
]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _gib(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**30:.1f}"


def _swaps(r: dict[str, Any]) -> str:
    v = r.get("variant") or {}
    swaps = v.get("swaps") or []
    if not swaps:
        return "compiled" if v.get("compiled_modules") else "none"
    applicable = [s for s in swaps if s["status"] not in ("off", "n/a")]  # n/a: the model has no such spot
    ok = [s["kind"] for s in applicable if s["status"] == "ok"]
    missing = [s["kind"] for s in applicable if s["status"] != "ok"]
    text = f"{len(ok)}/{len(applicable)}"
    return text + (f" (missing: {', '.join(missing)})" if missing else "")


def rows(summary: dict[str, Any]) -> list[list[str]]:
    out = []
    for name, r in summary["variants"].items():
        if r.get("status") != "ok":
            out.append([name, r.get("status", "?"), "-", "-", (r.get("error") or "")[:80], *["-"] * 7])
            continue
        st = r["step_time_s"]
        u = r.get("utilisation", {})
        palm, meg = u.get("palm", {}), u.get("megatron", {})
        mem = r.get("memory", {})
        par = r.get("parity", {})
        out.append([
            name,
            "ok",
            _swaps(r),
            f"{r['tokens_per_s_per_rank']:,.0f}",
            f"{1e3 * st['median']:.1f} ({1e3 * st['p10']:.1f}–{1e3 * st['p90']:.1f})",
            _pct(palm.get("mfu_datasheet")),
            _pct(palm.get("mfu_calibrated")),
            _pct(meg.get("mfu_datasheet")),
            _gib(mem.get("max_allocated_bytes")),
            _gib(mem.get("max_reserved_bytes")),
            f"{r['losses'][-1]:.4f}",
            ("ok" if par.get("ok") else "FAIL") + (f" (max Δ {par['max_abs_diff']:.3g})" if par else ""),
        ])  # fmt: skip
    return out


CONSOLE_COLUMNS = [
    "variant",
    "status",
    "swaps",
    "tok/s",
    "step ms",
    "MFU palm sheet/calib",
    "peak GiB",
    "loss",
    "parity",
]


def console_rows(summary: dict[str, Any]) -> list[list[str]]:
    """A narrower table for the terminal (the Markdown/HTML carry every column)."""
    out = []
    for r in rows(summary):
        swaps = r[2].split(" (")[0]
        parity = r[11].split(" (")[0]
        out.append([r[0], r[1], swaps, r[3], r[4].split(" (")[0], f"{r[5]} / {r[6]}", r[8], r[10], parity])
    return out


def _goal_lines(summary: dict[str, Any]) -> list[str]:
    lines = []
    for key, g in summary["goals"].items():
        if not isinstance(g, dict):
            continue
        verdict = "met" if g["met"] else "NOT met" if g["met"] is False else "n/a"
        if key == "loss_parity":
            lines.append(f"- loss parity for every variant: {verdict}")
            continue
        if "value" not in g:  # a check without a number (the step-0 gradient check)
            flagged = {k: v for k, v in (g.get("flagged") or {}).items() if v}
            lines.append(f"- {key}: {verdict}" + (f" (flagged: {flagged})" if flagged else ""))
            continue
        if isinstance(g["target"], str):  # an exact count (graph breaks)
            lines.append(f"- {key}: {'not measured' if g['value'] is None else g['value']} vs goal {g['target']} "
                         f"— {verdict}")  # fmt: skip
            continue
        if g["value"] is None:
            lines.append(f"- {key} ≥ {g['target']}: not measured")
            continue
        verdict = "met" if g["met"] else "NOT met"
        partial = "" if g.get("all_swaps_available") else " (some swaps unavailable)"
        lines.append(f"- {key}: {g['value']:.3f} vs goal ≥ {g['target']} — {verdict}{partial}")
    return lines


def markdown(summary: dict[str, Any]) -> str:
    cfg = summary["config"]
    s = summary["settings"]
    peaks = summary["peaks"]
    env = next((r.get("env") for r in summary["variants"].values() if r.get("env")), {}) or {}
    head = [
        f"## Training step: `{cfg['name']}` (batch {cfg['batch']} × seq {cfg['seq']}, {s['dtype']}, "
        f"nproc {s['nproc']})",
        "",
        f"Device {env.get('gpu') or env.get('cpu', '?')}; torch {env.get('torch', '?')}, "
        f"triton {env.get('triton', '?')}; "
        f"{summary['date_utc']}. {s['warmup']} warm-up + {s['steps']} timed steps; {summary['timing_note']}.",
        "",
        "MFU conventions: " + "; ".join(f"**{k}** = {v}" for k, v in summary["flop_conventions"].items()) + ". "
        f"Peaks: datasheet {_tf(peaks.get('datasheet'))} ({peaks['sources'].get('datasheet', 'unknown')}), "
        f"calibrated {_tf(peaks.get('calibrated'))} ({peaks['sources'].get('calibrated', 'not measured')}).",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    body = ["| " + " | ".join(r) + " |" for r in rows(summary)]
    tail = ["", "Iso-batch speedups (tokens/s ratios): " + ", ".join(
        f"{k} {v:.3f}×" for k, v in summary["speedups_iso_batch"].items()) or "none", ""]  # fmt: skip
    if summary.get("peak_memory_cuts"):
        tail += [
            "Peak-memory cuts: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in summary["peak_memory_cuts"].items()),
            "",
        ]
    tail += ["Goals:", *_goal_lines(summary), ""]
    tail += _detail_lines(summary)
    if summary.get("max_batch"):
        tail += ["Max-batch throughput (not a speedup):"]
        for v, m in summary["max_batch"].items():
            tail.append(f"- {v}: max batch {m['max_batch']}, {m.get('tokens_per_s_at_max') or 0:,.0f} tok/s")
        tail.append("")
    if summary.get("scaling"):
        tail += ["Scaling efficiency (per-rank tok/s at nproc ÷ 1-process tok/s):"]
        tail += [f"- {v}: {m['efficiency']:.3f}" for v, m in summary["scaling"].items()]
    return "\n".join(head + body + tail) + "\n"


def _detail_lines(summary: dict[str, Any]) -> list[str]:
    """Graph breaks, the step-0 gradient check and the loss curve of every variant that ran."""
    out = []
    for name, r in summary["variants"].items():
        if r.get("status") != "ok":
            continue
        g = r.get("grad_check_step0")
        check = ""
        if g:
            flagged = ", ".join(g["flagged"]) or "none"
            check = (f"; step-0 gradients vs eager: worst {g['worst_value']:.3g} ({g['worst']}), median "
                     f"{g['median']:.3g}, flagged above {g['flag_above']:g}: {flagged}")  # fmt: skip
        breaks = r.get("graph_breaks")
        out.append(f"- {name}: graph breaks {'-' if breaks is None else breaks}{check}; losses "
                   + " ".join(f"{v:.4f}" for v in r.get("losses", [])))  # fmt: skip
    return ["Per variant (graph breaks under compile, gradient check, loss curve over every step):", *out, ""]


def _tf(x: float | None) -> str:
    return "-" if not x else f"{x / 1e12:.0f} TFLOP/s"


def html_section(summary: dict[str, Any]) -> str:
    cfg = summary["config"]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows(summary))
    goals = "".join(f"<li>{html.escape(line[2:])}</li>" for line in _goal_lines(summary))
    return (
        f"<section class='solkit-train'><h2>Training step: {html.escape(cfg['name'])} "
        f"(batch {cfg['batch']} × seq {cfg['seq']})</h2>"
        f"<p>{html.escape(summary['timing_note'])}</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table><ul>{goals}</ul></section>\n"
    )
