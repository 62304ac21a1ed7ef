"""Matplotlib figures of a bench run: roofline, SOL-fraction histogram, per-op bars by backend."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: figures are written to files, never shown
import matplotlib.pyplot as plt  # noqa: E402

from solkit.report.verdict import device_label  # noqa: E402

BACKEND_COLORS = {
    "eager": "#7f7f7f",
    "compile": "#1f77b4",
    "vendor": "#2ca02c",
    "liger": "#ff7f0e",
    "solkit": "#d62728",
}


def _ok(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("status") == "ok" and r.get("ms")]


def _basis(results: dict[str, Any]) -> str:
    """The calibrated basis when the run has it (the fraction of what this card can do), else spec."""
    return "calibrated" if any(r.get("sol_calibrated") is not None for r in results["rows"]) else "spec"


def roofline_backends(results: dict[str, Any]) -> list[str]:
    """The backends the roofline's legend lists: only those with a point on it (a backend that never ran has none)."""
    ran = {r["backend"] for r in _ok(results["rows"]) if r.get("flops_total") and r.get("fused_bytes")}
    order = list(BACKEND_COLORS)
    return sorted(ran, key=lambda b: (order.index(b) if b in order else len(order), b))


def roofline(results: dict[str, Any], path: Path) -> Path:
    """Every measured point (arithmetic intensity, achieved FLOP/s) against the measured and datasheet roofs."""
    meta = results["meta"]
    quick = (meta.get("calibration") or {}).get("quick")
    fig, ax = plt.subplots(figsize=(8, 5.5))
    xs = [10 ** (k / 10) for k in range(-20, 51)]
    for basis, style in (("spec", "--"), ("calibrated", "-")):
        c = meta.get("ceilings", {}).get(basis)
        if not c:
            continue
        bw = c["bandwidth"]
        for unit in ("bf16_tensor", "fp32_vector"):
            peak = c["flops"].get(unit)
            if peak:
                ax.plot(
                    xs,
                    [min(peak, bw * x) / 1e12 for x in xs],
                    style,
                    lw=1.2,
                    color="black" if unit == "bf16_tensor" else "gray",
                    label=f"{basis}{' (quick)' if basis == 'calibrated' and quick else ''}: {unit} "
                    f"{peak / 1e12:.3g} TFLOP/s, {bw / 1e12:.3g} TB/s",
                )
    for r in _ok(results["rows"]):
        if not r.get("flops_total") or not r.get("fused_bytes"):
            continue
        ai = r["flops_total"] / r["fused_bytes"]
        ax.scatter(
            ai,
            r["flops_total"] / (r["ms"] * 1e-3) / 1e12,
            s=22,
            alpha=0.8,
            color=BACKEND_COLORS.get(r["backend"], "purple"),
            edgecolors="none",
        )
    for name in roofline_backends(results):
        ax.scatter([], [], color=BACKEND_COLORS.get(name, "purple"), label=name)
    if not ax.get_lines() and not any(len(c.get_offsets()) for c in ax.collections):
        ax.set_xlim(0.01, 1e5)  # nothing to draw (a results file without ceilings or work): keep the axes sane
        ax.set_ylim(1e-3, 1e4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / fused byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"Roofline: {device_label(meta)}")
    ax.grid(True, which="both", alpha=0.25)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def sol_histogram(results: dict[str, Any], path: Path) -> Path:
    """The distribution of SOL fractions across the suite (the seed's bimodal picture)."""
    basis = _basis(results)
    fig, ax = plt.subplots(figsize=(7, 4))
    by_backend: dict[str, list[float]] = defaultdict(list)
    for r in _ok(results["rows"]):
        v = r.get(f"sol_{basis}")
        if v is not None:
            by_backend[r["backend"]].append(v)
    bins = [i / 20 for i in range(21)]
    if by_backend:
        names = sorted(by_backend)
        ax.hist(
            [by_backend[n] for n in names],
            bins=bins,
            stacked=True,
            label=names,
            color=[BACKEND_COLORS.get(n, "purple") for n in names],
        )
        ax.legend(fontsize=8)
    for x in (0.6, 0.8):
        ax.axvline(x, color="black", lw=0.8, ls=":")
    ax.set_xlabel(f"SOL fraction ({basis} basis)")
    ax.set_ylabel("measurements")
    ax.set_title("SOL fractions across the suite (tiers at 0.6 and 0.8)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def per_op_bars(results: dict[str, Any], path: Path) -> Path:
    """Best SOL fraction per problem, one bar per backend (largest size class measured)."""
    basis = _basis(results)
    best: dict[tuple[str, str], float] = {}
    for r in _ok(results["rows"]):
        v = r.get(f"sol_{basis}")
        if v is None:
            continue
        key = (r["problem"], r["backend"])
        best[key] = max(best.get(key, 0.0), v)
    problems = sorted({p for p, _ in best})
    backends = [b for b in BACKEND_COLORS if any((p, b) in best for p in problems)]
    fig, ax = plt.subplots(figsize=(max(7, 0.55 * len(problems) + 2), 4.5))
    width = 0.8 / max(len(backends), 1)
    for i, b in enumerate(backends):
        xs = [j + i * width for j in range(len(problems))]
        ax.bar(xs, [best.get((p, b), 0.0) for p in problems], width, label=b, color=BACKEND_COLORS[b])
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(problems))])
    ax.set_xticklabels(problems, rotation=60, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(f"best SOL fraction ({basis})")
    ax.legend(fontsize=8, ncol=len(backends) or 1)
    ax.set_title("SOL fraction per operator and backend")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def all_figures(results: dict[str, Any], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    return {
        "roofline": roofline(results, out / "roofline.png"),
        "sol_histogram": sol_histogram(results, out / "sol_histogram.png"),
        "per_op": per_op_bars(results, out / "per_op.png"),
    }
