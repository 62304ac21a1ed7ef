"""Write a bench run as JSON, CSV, Markdown and a self-contained HTML report (figures inlined)."""

from __future__ import annotations

import base64
import csv
import html
import json
from pathlib import Path
from typing import Any

from solkit.errors import SolkitError
from solkit.report.crossarch import what_if_markdown, what_if_rows
from solkit.report.figures import all_figures

COLUMNS = [
    ("problem", "op"),
    ("size", "size"),
    ("model", "model"),
    ("backend", "backend"),
    ("status", "check"),
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


def markdown(results: dict[str, Any], figures: dict[str, Path] | None = None) -> str:
    m = results["meta"]
    lines = [
        f"# solkit bench: {m.get('device', {}).get('name', '?')}",
        "",
        f"- date: {m.get('date')}; command: `{m.get('command')}`",
        f"- device: {m.get('device', {}).get('name')} (arch `{m.get('arch')}`); versions: "
        + ", ".join(f"{k} {v}" for k, v in (m.get("versions") or {}).items()),
        f"- size class: {m.get('sizes')}; backends: {', '.join(m.get('backends', []))}",
        f"- timing: {m.get('timing_policy')}; methods used: {timing_note(results['rows'])}",
        "- SOL fraction = T_SOL / T_measured on two bases: **spec** (datasheet dense peaks) and **calibrated** "
        "(ceilings measured on this device); a time below T_SOL is flagged, never scored above 1.",
    ]
    for basis, c in (m.get("ceilings") or {}).items():
        bf = c["flops"].get("bf16_tensor")
        lines.append(
            f"- {basis} ceilings: bandwidth {c['bandwidth'] / 1e12:.2f} TB/s"
            + (f", bf16 tensor {bf / 1e12:.0f} TFLOP/s" if bf else "")
        )
    for n in m.get("notes", []):
        lines.append(f"- note: {n}")
    lines += ["", "| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in results["rows"]:
        cells = [_fmt(r.get(k)) for k, _ in COLUMNS]
        if r.get("status") != "ok":
            cells[4] = f"{r.get('status')}: {r.get('error') or ''}".replace("|", "/")
        if r.get("sol_violation"):
            cells[4] += " (SOL violation)"
        lines.append("| " + " | ".join(cells) + " |")
    diagnosed = [r for r in results["rows"] if r.get("profile") and r["profile"].get("summary")]
    if diagnosed:
        lines += ["", "## Nsight Compute diagnosis", ""]
        lines += [
            f"- **{r['problem']}** [{r.get('size')}/{r.get('model')}]: {r['profile']['summary']}" for r in diagnosed
        ]
    if results.get("what_if"):
        lines += what_if_markdown(results["what_if"])
    advice = {(r.get("tier"), r.get("advice")) for r in results["rows"] if r.get("advice")}
    if advice:
        lines += ["", "## Tiers and advice", ""] + [f"- **{t}**: {a}" for t, a in sorted(advice)]
    if figures:
        lines += ["", "## Figures", ""] + [f"![{k}]({p.name})" for k, p in figures.items()]
    return "\n".join(lines) + "\n"


def write_csv(results: dict[str, Any], path: Path) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in results["rows"]:
            t = r.get("timing") or {}
            w.writerow({**r, "timing_method": t.get("method"), "cv": t.get("cv")})


def html_report(results: dict[str, Any], figures: dict[str, Path]) -> str:
    m = results["meta"]
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in COLUMNS)
    body = []
    for r in results["rows"]:
        cls = {"ok": "ok", "unavailable": "na"}.get(r.get("status"), "bad")
        cells = [html.escape(_fmt(r.get(k))) for k, _ in COLUMNS]
        if r.get("status") != "ok":
            cells[4] = html.escape(f"{r.get('status')}: {r.get('error') or ''}")
        body.append(f"<tr class='{cls}'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    imgs = "".join(
        f"<figure><img alt='{k}' src='data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}'>"
        f"<figcaption>{html.escape(k)}</figcaption></figure>"
        for k, p in figures.items()
    )
    what_if = _what_if_html(results["what_if"]) if results.get("what_if") else ""
    meta_items = "".join(
        f"<li>{html.escape(line[2:])}</li>" for line in markdown(results).splitlines()[2:] if line.startswith("- ")
    )
    title = html.escape(f"solkit bench: {m.get('device', {}).get('name', '?')}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
td:nth-child(-n+5) {{ text-align: left; }}
tr.bad td {{ background: #fde2e2; }} tr.na td {{ color: #999; }} tr.changed td {{ background: #fff4d6; }}
figure {{ display: inline-block; margin: 0.5em; }} img {{ max-width: 720px; }}
</style></head>
<body><h1>{title}</h1><ul>{meta_items}</ul>
<table id="results"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>
{what_if}<h2>Figures</h2>{imgs}
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
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str, allow_nan=True))
    write_csv(results, out / "results.csv")
    figures = all_figures(results, out)
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
    """Rows of two runs side by side, matched on (problem, size, model, backend)."""
    key = lambda r: (r["problem"], r.get("size"), r.get("model"), r["backend"])  # noqa: E731
    right = {key(r): r for r in b["rows"]}
    out = []
    for r in a["rows"]:
        o = right.get(key(r))
        if o is None:
            continue
        out.append(
            {
                "problem": r["problem"],
                "size": r.get("size"),
                "model": r.get("model"),
                "backend": r["backend"],
                "ms_a": r.get("ms"),
                "ms_b": o.get("ms"),
                "speedup_b_over_a": (r["ms"] / o["ms"]) if r.get("ms") and o.get("ms") else None,
                "sol_a": r.get("sol_calibrated") or r.get("sol_spec"),
                "sol_b": o.get("sol_calibrated") or o.get("sol_spec"),
            }
        )
    return out
