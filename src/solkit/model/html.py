"""The model report as JSON and a self-contained HTML page (figures inlined), reusing solkit.report's figures."""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from solkit.model.report import ModelReport
from solkit.output import fmt, jsonable
from solkit.report.crossarch import what_if_cell

OP_COLUMNS = [("rank_label", "rank"), ("name", "operator"), ("category", "module type"), ("calls", "calls"),
              ("time_ms", "ms"), ("t_sol_ms", "T_SOL ms"), ("sol_fraction", "SOL"),
              ("lost_ms_median", "lost ms (median)"), ("lost_ms_min", "lost min"), ("lost_ms_max", "lost max"),
              ("bound", "bound"), ("tier", "tier"), ("advice", "advice")]  # fmt: skip
GROUP_COLUMNS = [("name", "name"), ("calls", "calls"), ("time_ms", "ms"), ("t_sol_ms", "T_SOL ms"),
                 ("sol_fraction", "SOL"), ("lost_ms", "lost ms"), ("tier", "tier")]  # fmt: skip


def summary_lines(d: dict[str, Any]) -> list[str]:
    """The step-level facts, one line each (the table footer and the HTML header)."""
    s, m = d["summary"], d["meta"]
    check = "yes" if s["sum_t_sol_le_measured"] else "NO: a violation (T_SOL above measured; never scored above 1)"
    return (
        [
            f"model: {m['model']}; mode {m['mode']}{', torch.compile' if m['compile'] else ', eager'}"
            + (f"; optimizer {m['optimizer']}" if m.get("optimizer") else ""),
            f"device: {m['device'].get('name')} ({m['device'].get('kind')}); ceilings {m['arch']} ({m['basis']}); "
            f"precision {m['precision']}",
            f"measured: {fmt(s['measured_ms'])} ms ({m['time_source']}); wall {fmt(s['wall_ms'])} ms",
            f"step SOL: sum of T_SOL {fmt(s['t_sol_ms'])} ms / measured = {fmt(s['step_sol'])}; "
            f"sum of T_SOL <= measured: {check}",
            f"attributed to operators with a T_SOL: {s['attributed_share']:.1%} of measured time "
            f"(goal {s['attributed_goal']:.0%})"
            + (
                f"; of it on operators with a T_SOL of ~0: {s['t_sol_near_zero_share']:.1%}"
                if s.get("t_sol_near_zero_share")
                else ""
            ),  # fmt: skip
            f"analysis overhead: {fmt(s['analysis_overhead_s'])} s",
        ]
        + _device_lines(d)
        + _what_if_lines(d)
        + _bench_check_lines(d)
    )


def _device_lines(d: dict[str, Any]) -> list[str]:
    ev = d["meta"].get("device_events")
    if not ev:
        return []
    left = "; ".join(f"{k} {fmt(v)} ms" for k, v in ev["dropped_ms"].items()) or "nothing"
    return [f"device events: busy {fmt(ev['device_busy_ms'])} ms (the union of the counted kernels' intervals); "
            f"linked by {ev['linking']}; left out: {left}; linked only to ops that started after them "
            f"{fmt(ev['mislinked_ms'])} ms"]  # fmt: skip


def _bench_check_lines(d: dict[str, Any]) -> list[str]:
    c = d.get("bench_check")
    if not c:
        return []
    s = c["summary"]
    lines = []
    for label, bench, lay in (("sustained", "bench", "layout"), ("burst", "bench_burst", "layout_burst")):
        b, lo = s.get(bench) or {}, s.get(lay) or {}
        if label not in s.get("timings", ["sustained"]) or not (b.get("compared") or lo.get("compared")):
            continue
        state = f"burst, step-matched at duty {fmt(s.get('duty'))}" if label == "burst" else "sustained, back to back"
        judged = " (the goal's comparison)" if s.get("judged_on", "sustained") == label else ""
        lines.append(f"GEMMs against solkit bench ({state}){judged}: SOL within {c['tolerance']:.0%} of the bench's "
                     f"for {b.get('within')}/{b.get('compared')} (gemm_bf16, vendor) and {lo.get('within')}/"
                     f"{lo.get('compared')} (the model's own layouts); worst ratio {fmt(b.get('worst_ratio'))} "
                     f"({b.get('worst')})")  # fmt: skip
    return lines


def bench_check_rows(c: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of the GEMM check table (``solkit model-check``): per call, the model's SOL, and per timing
    (sustained: back to back; burst: step-matched idle gaps) the bench's SOL and the ratios, with the SM clocks."""

    def cell(ratio, ok):
        return "-" if ratio is None else f"{fmt(ratio)} {'yes' if ok else 'NO'}"

    def mhz(clock):  # "~": the step's clock estimated from the nearest sample (no sample inside its kernels)
        return ("~" if (clock or {}).get("nearest") else "") + fmt((clock or {}).get("sm_clock_mhz"), 4)

    cols = ["GEMM (model's call)", "calls", "model ms", "T_SOL ms", "model SOL", "sustained: bench SOL",
            "ratio, within?", "layout ratio", "burst: bench SOL", "ratio, within?", "burst at equal clocks",
            "layout ratio", "MHz model / sustained / burst"]  # fmt: skip
    rows = []
    for r in c["rows"]:
        b, bb = r.get("bench") or {}, r.get("bench_burst") or {}
        clocks = f"{mhz(r.get('model_clock'))} / {mhz(b.get('clock'))} / {mhz(bb.get('clock'))}"
        rows.append([r["name"], r["calls"], r["model_ms_per_call"], r["model_t_sol_ms"], r["model_sol"],
                     b.get("sol_raw") or b.get("status"), cell(r.get("ratio"), r.get("within")),
                     cell(r.get("layout_ratio"), r.get("layout_within")), bb.get("sol_raw") or bb.get("status"),
                     cell(r.get("ratio_burst"), r.get("within_burst")),
                     cell(r.get("ratio_burst_per_clock"), r.get("within_burst_per_clock")),
                     cell(r.get("layout_ratio_burst"), r.get("layout_within_burst")), clocks])  # fmt: skip
    return cols, rows


def _bench_check_html(d: dict[str, Any]) -> str:
    c = d.get("bench_check")
    if not c:
        return ""
    cols, rows = bench_check_rows(c)
    return (f"<h2>GEMMs against solkit bench (solkit model-check)</h2><p>ratio = the model's SOL fraction / the "
            f"bench's at the same call (ms per call); within {c['tolerance']:.0%} or not. bench: the suite's "
            "gemm_bf16 (x @ w.T) on the vendor backend; layout: the call with the model's operand layouts, eager. "
            "sustained: calls back to back (the card reaches its power cap); burst: idle before every call so the "
            "GEMM takes the share of time it took in the step (the goal is judged on it); at equal clocks: the burst "
            "ratio times the burst row's SM clock over the step's (~: the step's clock from the nearest sample). "
            f"{html.escape(c['meta']['protocol'])}.</p>"
            f"{_grid('bench-check', cols, rows, fmt)}")  # fmt: skip


def _what_if_lines(d: dict[str, Any]) -> list[str]:
    w = d.get("what_if")
    if not w:
        return []
    out = []
    for p, s in w["step"].items():
        vs = f" ({fmt(s['vs_here'])} x here)" if s.get("vs_here") is not None else ""
        gaps = f"; {s['unavailable_calls']} calls cannot run there" if s["unavailable_calls"] else ""
        out.append(f"what-if {p}: sum of T_SOL {fmt(s['t_sol_ms'])} ms{vs}{gaps} (analysis)")
    return out


def what_if_rows(d: dict[str, Any], top: int | None = None) -> tuple[list[str], list[list[str]]]:
    """Columns and rows of the what-if table: the step's sum first, then operators by time lost (``top`` of them).

    A star marks an operator whose bound changes between the products.
    """
    w = d["what_if"]
    here = d["meta"]["arch"]
    cols = ["operator", f"T_SOL {here}", "SOL here"] + [f"{p} (T_SOL bound tier)" for p in w["products"]]
    changed = set(w["bound_changes"])
    rows = [["step (sum of T_SOL)", f"{fmt(w['here_t_sol_ms'])} ms", fmt(d["summary"]["step_sol"])]
            + [f"{fmt(w['step'][p]['t_sol_ms'])} ms" for p in w["products"]]]  # fmt: skip
    ops = [o for o in d["ops"] if o.get("what_if")]
    for o in ops[:top] if top else ops:
        rows.append([o["name"] + (" *" if o["name"] in changed else ""),
                     f"{fmt(o['t_sol_ms'])} ms {(o['bound'] or '?')[0].upper()}", fmt(o["sol_fraction"])]
                    + [what_if_cell(o["what_if"][p]) for p in w["products"]])  # fmt: skip
    return cols, rows


def _what_if_html(d: dict[str, Any]) -> str:
    if not d.get("what_if"):
        return ""
    cols, rows = what_if_rows(d)
    return (f"<h2>What-if on {html.escape(', '.join(d['what_if']['products']))} (analysis, precision "
            f"{html.escape(str(d['what_if']['precision']))})</h2>"
            f"<p>{html.escape(d['what_if']['note'])}</p>"
            f"{_grid('what-if', cols, rows, str)}")  # fmt: skip


def _bench_shaped(d: dict[str, Any]) -> dict[str, Any]:
    """Rows in the shape solkit.report's figures read: one point per operator group."""
    basis = d["ceilings"]["basis"]
    backend = "compile" if d["meta"]["compile"] else "eager"
    rows = [
        {
            "problem": o["name"],
            "backend": backend,
            "status": "ok",
            "ms": o["time_ms"],
            "flops_total": o["flops"],
            "fused_bytes": o["bytes"],
            f"sol_{basis}": o["sol_fraction"],
        }  # fmt: skip
        for o in d["ops"]
        if o["sol_fraction"] is not None and o["time_ms"] > 0
    ]
    meta = {"ceilings": {basis: d["ceilings"]}, "device": d["meta"]["device"], "arch": d["meta"]["arch"]}
    return {"meta": meta, "rows": rows}


def _bars(groups: list[dict], title: str, path: Path, horizontal: bool = True) -> Path:
    import matplotlib.pyplot as plt

    names = [g["name"] for g in groups]
    sol = [g["t_sol_ms"] or 0.0 for g in groups]
    lost = [max(g["time_ms"] - (g["t_sol_ms"] or 0.0), 0.0) for g in groups]
    fig, ax = plt.subplots(figsize=(8, max(3, 0.28 * len(names) + 1.5)))
    ys = range(len(names))
    ax.barh(ys, sol, color="#2ca02c", label="T_SOL")
    ax.barh(ys, lost, left=sol, color="#d62728", label="time lost to SOL (measured - T_SOL)")
    ax.set_yticks(list(ys))
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figures(d: dict[str, Any], out: Path, top: int = 25) -> dict[str, Path]:
    """The figures (none where matplotlib is not installed: the page and JSON say so, the tables are complete)."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # headless: figures are written to files, never shown
        from solkit.report.figures import roofline, sol_histogram
    except ImportError as exc:
        notes = d.setdefault("meta", {}).setdefault("notes", [])
        if not any(n.startswith("no figures") for n in notes):
            notes.append(f"no figures: {exc}")
        return {}
    shaped = _bench_shaped(d)
    ranked = d["ops"][:top]  # in the report's order: by median time lost over the profiled steps
    return {
        "time_lost": _bars(ranked, f"Top {len(ranked)} operators by time lost to SOL", out / "time_lost.png"),
        "per_layer": _bars(d["layers"], "Per layer: T_SOL and time lost", out / "per_layer.png"),
        "roofline": roofline(shaped, out / "roofline.png"),
        "sol_histogram": sol_histogram(shaped, out / "sol_histogram.png"),
    }


def _grid(table_id: str, cols: list[str], rows: list[list[Any]], cell: Callable[[Any], str]) -> str:
    """A plain table: a header row and one row per list, each value written by ``cell``."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell(x))}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table id='{table_id}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _table(table_id: str, columns: list[tuple[str, str]], rows: list[dict]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in columns)
    body = "".join(
        f"<tr class='{'violation' if r.get('violation') else ('nosol' if r.get('sol_fraction') is None else 'ok')}'>"
        + "".join(f"<td>{html.escape(fmt(r.get(k)))}</td>" for k, _ in columns)
        + "</tr>"
        for r in rows
    )
    return f"<table id='{table_id}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_page(d: dict[str, Any], figs: dict[str, Path]) -> str:
    ranked = d["ops"]  # by median time lost over the profiled steps (solkit.model.ranking)
    n = d["summary"].get("steps_profiled", 1)
    notes = "".join(f"<li>{html.escape(x)}</li>" for x in d["meta"].get("notes", []))
    imgs = "".join(
        f"<figure><img alt='{k}' src='data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}'>"
        f"<figcaption>{html.escape(k)}</figcaption></figure>"
        for k, p in figs.items()
    )
    header = "".join(f"<li>{html.escape(line)}</li>" for line in summary_lines(d))
    title = html.escape(f"solkit model: {d['meta']['model']}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; margin-bottom: 1em; }}
td, th {{ border: 1px solid #ccc; padding: 2px 6px; text-align: right; }}
td:first-child, td:nth-child(2), td:last-child {{ text-align: left; }}
tr.violation td {{ background: #f8d0d0; }} tr.nosol td {{ color: #888; }}
figure {{ display: inline-block; margin: 0.5em; }} img {{ max-width: 720px; }}
</style></head>
<body><h1>{title}</h1><ul id="summary">{header}</ul>
<p>lost ms = measured time minus T_SOL (what a kernel at the speed of light would save). A row whose time is
below its T_SOL is a violation (a counting or timing error): it is shown in red and its SOL capped at 1.</p>
<h2>Operators, ranked by time lost to SOL</h2>
<p>Ranked by the median time lost over {n} profiled steps; min and max over them are the measured spread. Operators
whose spreads overlap are tied and share a rank (2=). ms, T_SOL and SOL are the median step's.</p><ul>{notes}</ul>
{_table("results", OP_COLUMNS, ranked)}
<h2>Per module type</h2>{_table("categories", GROUP_COLUMNS, d["categories"])}
<h2>Per module class</h2>{_table("module-types", GROUP_COLUMNS, d["module_types"])}
<h2>Per layer</h2>{_table("layers", GROUP_COLUMNS, d["layers"])}
{_what_if_html(d)}
{_bench_check_html(d)}
<h2>Figures</h2>{imgs}
<script>
// Self-check used by the tests: every figure decoded (when there are figures) and the ranked table has rows.
window.addEventListener('load', () => {{
  const imgs = Array.from(document.images);
  const ok = imgs.length === {len(figs)} && imgs.every(i => i.complete && i.naturalWidth > 0)
             && document.querySelectorAll('#results tbody tr').length > 0;
  document.body.setAttribute('data-report-ok', ok ? 'yes' : 'no');
}});
</script>
</body></html>
"""


def write_model_report(rep: ModelReport, out: str | Path) -> dict[str, Path]:
    """``results.json``, the figures and ``report.html`` under ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    d = jsonable(rep.to_dict())
    figs = figures(d, out)  # first: without matplotlib it notes so in d["meta"]
    (out / "results.json").write_text(json.dumps(d, indent=1, allow_nan=False))
    (out / "report.html").write_text(html_page(d, figs))
    return {"json": out / "results.json", "html": out / "report.html", **figs}
