"""Write a bench run as JSON, CSV, Markdown and a self-contained HTML report (figures inlined)."""

from __future__ import annotations

import base64
import csv
import html
import json
import re
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError
from solkit.report.crossarch import what_if_markdown, what_if_rows
from solkit.report.devices import devices_markdown, same_card
from solkit.report.verdict import LEGEND, NOISY_CV, basis_line, compare_verdict, device_label, verdict

COLUMNS = [
    ("problem", "op"),
    ("size", "size"),
    ("model", "model"),
    ("backend", "backend"),
    ("verdict", "check"),
    ("ms", "ms"),
    ("tflops", "TFLOP/s"),
    ("tbs", "TB/s"),
    ("sol_spec", "SOL spec"),
    ("sol_calibrated", "SOL calib."),
    ("bound", "bound"),
    ("speedup_vs_eager", "vs eager"),
    ("tier", "tier"),
]
CSV_FIELDS = [
    "problem",
    "op_type",
    "mode",
    "size",
    "model",
    "workload",
    "backend",
    "status",
    "verdict",
    "error",
    "ms",
    "tflops",
    "tbs",
    "flops_total",
    "fused_bytes",
    "t_sol_ms_spec",
    "t_sol_ms_calibrated",
    "sol_spec",
    "sol_calibrated",
    "sol_violation",
    "bound",
    "speedup_vs_eager",
    "tier",
    "advice",
    "max_abs_error",
    "eager_abs_error",
    "peak_memory_mb",
    "timing_method",
    "cv",
    "diagnosis",
]


def load_results(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise SolkitError(f"{p}: no such results file") from None
    except json.JSONDecodeError as exc:
        raise SolkitError(f"{p}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(data, dict) or "rows" not in data or "meta" not in data:
        raise SolkitError(f"{p}: not a solkit results file (needs 'meta' and 'rows')")
    return data


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def timing_note(rows: list[dict]) -> str:
    methods = sorted({(r.get("timing") or {}).get("method", "") for r in rows if r.get("timing")})
    return ", ".join(m for m in methods if m) or "none"


def _listed(v: Any) -> str:
    return ", ".join(str(x) for x in v) if isinstance(v, (list, tuple)) else str(v)


def header_lines(results: dict[str, Any]) -> list[str]:
    """The report's header, one Markdown list item each (shared by report.md, report.html and nothing else)."""
    m = results["meta"]
    lines = [
        f"date: {m.get('date')}; command: `{m.get('command')}`",
        f"device: {device_label(m)}; versions: " + ", ".join(f"{k} {v}" for k, v in (m.get("versions") or {}).items()),
        f"size class: {_listed(m.get('sizes'))}; backends: {_listed(m.get('backends', []))}",
        f"timing: {m.get('timing_policy')}; methods used: {timing_note(results['rows'])}",
        "SOL fraction = T_SOL / T_measured on two bases: **spec** (datasheet dense peaks) and **calibrated** "
        "(ceilings measured on this device); a time below T_SOL is a **violation**, never scored above 1.",
        f"**{basis_line(m)}**",
    ]
    for basis, c in (m.get("ceilings") or {}).items():
        peaks = ", ".join(f"{unit} {_fmt(v / 1e12)} TFLOP/s" for unit, v in sorted(c.get("flops", {}).items()) if v)
        quick = " (quick calibration)" if basis == "calibrated" and (m.get("calibration") or {}).get("quick") else ""
        lines.append(f"{basis} ceilings{quick}: bandwidth {_fmt(c['bandwidth'] / 1e12)} TB/s; {peaks or 'no peaks'}")
    lines.append(f"check: {'; '.join(f'**{k}** = {v}' for k, v in LEGEND.items())}")
    lines += [f"note: {n}" for n in m.get("notes", [])]
    return lines


def check_cell(r: dict[str, Any]) -> str:
    """The check column: the verdict, with the error of a row that was not timed correctly."""
    v = verdict(r)
    return v if v in ("ok", "noisy", "violation") else f"{v}: {r.get('error') or ''}"


def advice_sections(rows: list[dict]) -> dict[str, list[tuple[str, str]]]:
    """Each tier's advice once, under the bound it applies to (compute-bound and memory-bound tiers differ)."""
    out: dict[str, set[tuple[str, str]]] = {}
    for r in rows:
        if r.get("advice"):
            out.setdefault(f"{r.get('bound') or 'memory'}-bound rows", set()).add((r.get("tier"), r["advice"]))
    return {k: sorted(v, key=lambda t: str(t[0])) for k, v in sorted(out.items())}


def markdown(results: dict[str, Any], figures: dict[str, Path] | None = None) -> str:
    m = results["meta"]
    lines = [f"# solkit bench: {device_label(m)}", ""] + [f"- {line}" for line in header_lines(results)]
    lines += ["", "| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in results["rows"]:
        cells = [_fmt(r.get(k)) for k, _ in COLUMNS]
        cells[4] = check_cell(r).replace("|", "/")
        lines.append("| " + " | ".join(cells) + " |")
    lines += devices_markdown(results)
    diagnosed = [r for r in results["rows"] if r.get("profile") and r["profile"].get("summary")]
    if diagnosed:
        lines += ["", "## Nsight Compute diagnosis", ""]
        lines += [
            f"- **{r['problem']}** [{r.get('size')}/{r.get('model')}]: {r['profile']['summary']}" for r in diagnosed
        ]
    if results.get("what_if"):
        lines += what_if_markdown(results["what_if"])
    advice = advice_sections(results["rows"])
    if advice:
        lines += ["", "## Tiers and advice"]
        for bound, items in advice.items():
            lines += ["", f"### {bound}", ""] + [f"- **{t}**: {a}" for t, a in items]
    if figures:
        lines += ["", "## Figures", ""] + [f"![{k}]({p.name})" for k, p in figures.items()]
    return "\n".join(lines) + "\n"


def write_csv(results: dict[str, Any], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in results["rows"]:
            t = r.get("timing") or {}
            w.writerow({**r, "verdict": verdict(r), "timing_method": t.get("method"), "cv": t.get("cv")})


def md_inline(text: str) -> str:
    """Escape, then render the inline Markdown the header and advice use: **bold** and `code`."""
    out = html.escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", out)


#: Row colours of the HTML table, by verdict (the legend prints them).
ROW_COLOURS = {"ok": "#ffffff", "noisy": "#fff4d6", "violation": "#e8d8ff", "incorrect": "#fde2e2",
               "error": "#fde2e2", "unavailable": "#eeeeee"}  # fmt: skip


def html_report(results: dict[str, Any], figures: dict[str, Path]) -> str:
    m = results["meta"]
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in COLUMNS)
    body = []
    for r in results["rows"]:
        v = verdict(r)
        cells = [html.escape(_fmt(r.get(k))) for k, _ in COLUMNS]
        cells[4] = html.escape(check_cell(r))
        body.append(f"<tr class='{v}'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    imgs = "".join(
        f"<figure><img alt='{k}' src='data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}'>"
        f"<figcaption>{html.escape(k)}</figcaption></figure>"
        for k, p in figures.items()
    )
    what_if = _what_if_html(results["what_if"]) if results.get("what_if") else ""
    meta_items = "".join(f"<li>{md_inline(line)}</li>" for line in header_lines(results))
    legend = "".join(
        f"<li><span class='swatch' style='background:{ROW_COLOURS[k]}'></span><b>{k}</b>: {html.escape(v)}</li>"
        for k, v in LEGEND.items()
    )
    advice = "".join(
        f"<h3>{html.escape(bound)}</h3><ul>"
        + "".join(f"<li><b>{html.escape(str(t))}</b>: {md_inline(a)}</li>" for t, a in items)
        + "</ul>"
        for bound, items in advice_sections(results["rows"]).items()
    )
    advice = f"<h2>Tiers and advice</h2>{advice}" if advice else ""
    colours = " ".join(f"tr.{k} td {{ background: {c}; }}" for k, c in ROW_COLOURS.items())
    title = html.escape(f"solkit bench: {device_label(m)}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
td:nth-child(-n+5) {{ text-align: left; }}
{colours} tr.unavailable td {{ color: #999; }} tr.changed td {{ background: #fff4d6; }}
.swatch {{ display: inline-block; width: 1em; height: 1em; border: 1px solid #999; margin-right: 0.4em;
  vertical-align: middle; }}
figure {{ display: inline-block; margin: 0.5em; }} img {{ max-width: 720px; }}
</style></head>
<body><h1>{title}</h1><ul id="header">{meta_items}</ul>
<h2>Legend</h2><ul id="legend">{legend}</ul>
<p>noisy: the timing's coefficient of variation is above {NOISY_CV:.0%}; noisy and violation rows are kept out of
comparisons (<code>solkit report a b</code>).</p>
<table id="results"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>
{what_if}{advice}<h2>Figures</h2>{imgs}
<script>
// Self-check used by the tests: every figure decoded and the table has rows.
window.addEventListener('load', () => {{
  const imgs = Array.from(document.images);
  const ok = imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0)
             && document.querySelectorAll('#results tbody tr').length > 0;
  document.body.setAttribute('data-report-ok', ok ? 'yes' : 'no');
}});
</script>
</body></html>
"""


def _what_if_html(section: dict[str, Any]) -> str:
    cols, rows = what_if_rows(section)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join(
        f"<tr class='{'changed' if r['bound_changes'] else 'ok'}'>"
        + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells)
        + "</tr>"
        for r, cells in zip(section["rows"], rows)
    )
    return (f"<h2>What-if on {html.escape(', '.join(section['products']))} (analysis)</h2>"
            f"<p>{html.escape(section['note'])}</p><table id='what-if'><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>")  # fmt: skip


def write_report(results: dict[str, Any], out: str | Path) -> dict[str, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    try:  # the figures need matplotlib; without it (a minimal install) the tables, JSON and CSV are still written
        from solkit.report.figures import all_figures
    except ImportError as exc:
        all_figures = None
        results.setdefault("meta", {}).setdefault("notes", []).append(f"no figures: {exc}")
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str, allow_nan=True))
    write_csv(results, out / "results.csv")
    figures = all_figures(results, out) if all_figures else {}
    (out / "report.md").write_text(markdown(results, figures))
    (out / "report.html").write_text(html_report(results, figures))
    return {
        "json": out / "results.json",
        "csv": out / "results.csv",
        "markdown": out / "report.md",
        "html": out / "report.html",
        **figures,
    }


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of two runs side by side, matched on (problem, size, model, backend).

    ``verdict`` says faster / slower only when the 95 % interval of the time ratio (a over b, from the per-trial
    medians) excludes 1.0; rows noisy or wrong in either run are not compared (see solkit.report.verdict).
    """
    key = lambda r: (r["problem"], r.get("size"), r.get("model"), r["backend"])  # noqa: E731
    right = {key(r): r for r in b["rows"]}
    out = []
    for r in a["rows"]:
        o = right.get(key(r))
        if o is None or not same_card(r, o):  # times from two cards are never compared (report.devices)
            continue
        said, ci = compare_verdict(r, o)
        out.append(
            {
                "problem": r["problem"],
                "size": r.get("size"),
                "model": r.get("model"),
                "backend": r["backend"],
                "ms_a": r.get("ms"),
                "ms_b": o.get("ms"),
                "speedup_b_over_a": (r["ms"] / o["ms"]) if r.get("ms") and o.get("ms") else None,
                "ci95_low": ci[0] if ci else None,
                "ci95_high": ci[1] if ci else None,
                "verdict": said,
                "sol_a": r.get("sol_calibrated") or r.get("sol_spec"),
                "sol_b": o.get("sol_calibrated") or o.get("sol_spec"),
            }
        )
    return out
