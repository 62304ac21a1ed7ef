"""Tables from a gemm_oproj result JSON: the plain-text table, the markdown table of docs/kernels/gemm.md
and the issue's done-when checks (lab/benchmarks/gemm_oproj.py --render JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from solkit.sol.model import Ceilings, sol_fraction, t_sol


def print_table(doc: dict[str, Any]) -> None:
    """The rows of a result document as a plain-text table (stdout)."""
    hdr = f"{'M':>6} {'N':>5} {'K':>5}  {'variant':34s} {'ms':>8} {'TF/s':>6} {'SOLspec':>7} {'SOLcal':>6} "
    print("\n" + hdr + f"{'MFU':>5}  ok  config")
    for row in doc["rows"]:
        head = f"{row['M']:>6} {row['N']:>5} {row['K']:>5}  {row['variant']:34s} "
        if "median_ms" not in row:
            print(head + "ERROR " + row.get("error", "")[:60])
            continue
        cfg = row.get("launch", {}).get("config", {})
        short = "x".join(str(cfg.get(k, "")) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")) if cfg else ""
        if cfg:
            short += f" w{cfg.get('num_warps')} s{cfg.get('num_stages')} {row['launch'].get('kernel', '')}"
        print(
            head + f"{row['median_ms']:8.4f} {row['tflops']:6.0f} {row['sol_spec']:7.3f} {row['sol_calibrated']:6.3f} "
            f"{row['mfu_spec']:5.2f}  {'y' if row.get('correct') else 'N'}  {short}"
        )


def rebase_bandwidth(doc: dict[str, Any], calibration: str) -> str:
    """Recompute the calibrated columns with the copy bandwidth of a ``solkit calibrate`` file (its
    GEMM ceiling stays the in-job one); returns a line saying so. Rows keep their measured times."""
    cal_file = json.loads(Path(calibration).read_text())
    bw = float(cal_file["bandwidth"]["copy"]["value"])
    flops = float(doc["ceilings"]["calibrated"]["flops"]["bf16_tensor"])
    ceil = Ceilings(doc["ceilings"]["calibrated"]["arch"], "calibrated", {"bf16_tensor": flops}, bw)
    for r in doc["rows"]:
        if "median_ms" not in r:
            continue
        M, N, K, sec = r["M"], r["N"], r["K"], r["median_ms"] * 1e-3
        nbytes = 2.0 * (M * K + N * K + 2 * M * N)
        sol = t_sol({"bf16_tensor": 2.0 * M * N * K}, nbytes, ceil)
        score = sol_fraction(sol.t_sol_s, sec)
        r.update(sol_calibrated=score.sol_fraction, sol_violation_calibrated=score.violation)
        r["bw_util_calibrated"] = nbytes / sec / bw
    doc["ceilings"]["calibrated"]["bandwidth"] = bw
    return (
        f"Calibrated bandwidth re-based on `{calibration}` ({cal_file['bandwidth']['copy']['size']}, "
        f"{cal_file['timestamp']}): {bw / 1e12:.2f} TB/s."
    )


def render_markdown(path: str, calibration: str | None = None) -> str:
    """The table section of docs/kernels/gemm.md, straight from a result JSON."""
    doc = json.loads(Path(path).read_text())
    note = rebase_bandwidth(doc, calibration) if calibration else ""
    cal = doc["ceilings"]["calibrated"]
    spec = doc["ceilings"]["spec"]
    lines = [
        f"Device {doc['device']['name']}, {doc['date']}, torch {doc['versions']['torch']}, "
        f"triton {doc['versions']['triton']}; `{doc['command']}`.",
        f"Spec basis: {spec['flops']['bf16_tensor'] / 1e12:.1f} TFLOP/s bf16, {spec['bandwidth'] / 1e12:.2f} TB/s. "
        f"Calibrated basis: {cal['flops']['bf16_tensor'] / 1e12:.0f} TFLOP/s (cuBLAS bf16 8192^3 in this job), "
        f"{cal['bandwidth'] / 1e12:.2f} TB/s copy. {note}",
        "",
        "| M | N | K | implementation | median ms | TFLOP/s | SOL (spec) | SOL (calibrated) | MFU (spec) | correct |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        if "median_ms" not in r:
            lines.append(f"| {r['M']} | {r['N']} | {r['K']} | {r['variant']} | error: {r.get('error', '')[:80]} |||||")
            continue
        ok = "yes" if r.get("correct") else "NO"
        lines.append(
            f"| {r['M']} | {r['N']} | {r['K']} | {r['variant']} | {r['median_ms']:.4f} | {r['tflops']:.0f} | "
            f"{r['sol_spec']:.3f} | {r['sol_calibrated']:.3f} | {r['mfu_spec']:.3f} | {ok} |"
        )
    lines += ["", *targets_markdown(doc)]
    return "\n".join(lines)


def targets_markdown(doc: dict[str, Any]) -> list[str]:
    """The issue's done-when checks, computed from the rows (met / not met, with the numbers)."""
    by: dict[tuple, dict[str, dict]] = {}
    for r in doc["rows"]:
        by.setdefault((r["M"], r["N"], r["K"]), {})[r["variant"].split(" (")[0]] = r
    out = ["| shape | check | value | target | met |", "|---|---|---|---|---|"]
    for (M, N, K), rows in by.items():
        fused = rows.get("after: solkit fused GEMM", {})
        addmm = rows.get("cuBLAS addmm", {})
        mm = rows.get("matmul alone", {})
        if "median_ms" not in fused:
            out.append(f"| {M}x{N}x{K} | fused kernel | {fused.get('error', 'not run')[:60]} | - | no |")
            continue
        shape = f"{M}x{N}x{K}"
        if M > 64:
            if "median_ms" in addmm:
                x = addmm["median_ms"] / fused["median_ms"]
                out.append(
                    f"| {shape} | speed vs cuBLAS addmm | {x:.3f}x | >= 1.03x | {'yes' if x >= 1.03 else 'no'} |"
                )
            if "median_ms" in mm:
                x = fused["median_ms"] / mm["median_ms"] - 1
                out.append(f"| {shape} | time over matmul alone | {x:+.1%} | <= +3% | {'yes' if x <= 0.03 else 'no'} |")
            comp = rows.get("torch.compile", {})
            if "median_ms" in comp:
                x = comp["median_ms"] / fused["median_ms"]
                out.append(f"| {shape} | speed vs torch.compile | {x:.3f}x | (no target) | - |")
        else:
            sol = fused["sol_calibrated"]
            out.append(
                f"| {shape} | memory SOL (calibrated) | {sol:.3f} | >= 0.85 | {'yes' if sol >= 0.85 else 'no'} |"
            )
            span = fused.get("kernel_span", {})
            if "median_ms" in span:
                out.append(
                    f"| {shape} | memory SOL on the kernel span (CUPTI, {span['median_ms'] * 1e3:.1f} us; "
                    f"not the harness median) | {span['sol_calibrated']:.3f} | (context) | - |"
                )
            for name, ref in (("cuBLAS addmm", addmm), ("cuBLAS matmul alone", mm)):
                if "median_ms" in ref:
                    x = ref["median_ms"] / fused["median_ms"]
                    out.append(f"| {shape} | speed vs {name} | {x:.3f}x | >= 1.00x | {'yes' if x >= 1.0 else 'no'} |")
        ok = "yes" if fused.get("correct") else "no"
        err, allowed = fused.get("rel_err", float("nan")), fused.get("allowed_rel_err", 0.0)
        out.append(f"| {shape} | relative error vs fp32 | {err:.2e} | <= {allowed:.2e} | {ok} |")
    return out


def _config_tag(cfg: dict[str, Any]) -> str:
    """A sweep config in a few characters: kernel, tile, stages, epilogue pieces and the stream-K knobs."""
    tag = f"{cfg.get('kernel', '')} {cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} st{cfg.get('num_stages')}"
    tag += f" epi{cfg.get('EPI_SUBTILE', 1)}{'' if cfg.get('FLATTEN', True) else ' unflat'}"
    if cfg.get("kernel") == "streamk":
        tag += f" SK{cfg.get('SK_WAVES', 1)}"
    if cfg.get("GROUP_M", 8) != 8:
        tag += f" G{cfg['GROUP_M']}"
    return tag + f" pre{cfg.get('PREFETCH_RES', 0)}"


def render_sweep_markdown(path: str) -> str:
    """The prefill sweep of a result JSON: per shape, every config (with and without the residual) against
    cuBLAS matmul and addmm timed in the same interleaved trials."""
    doc = json.loads(Path(path).read_text())
    base = {(b["M"], b["N"], b["K"]): b for b in doc.get("sweep_baselines", [])}
    lines = [
        f"Device {doc['device']['name']}, {doc['date']}, torch {doc['versions']['torch']}, "
        f"triton {doc['versions']['triton']}; `{doc['command']}`.",
        "",
        "| shape | config | residual | median ms | vs cuBLAS addmm | over cuBLAS matmul | spread ms | correct |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in doc.get("sweep", []):
        if row.get("regime") != "prefill":
            continue
        shape = f"{row['M']}x{row['N']}x{row['K']}"
        res = "yes" if row.get("residual", True) else "no"
        if "median_ms" not in row:
            lines.append(f"| {shape} | {_config_tag(row['config'])} | {res} | error: {row.get('error', '?')[:60]} ||||")
            continue
        over = row.get("over_mm", 1 / row["vs_mm"] - 1 if row.get("vs_mm") else float("nan"))
        lines.append(
            f"| {shape} | {_config_tag(row['config'])} | {res} | {row['median_ms']:.4f} | {row['vs_addmm']:.3f}x | "
            f"{over:+.1%} | {row['spread_ms']:.4f} | {'yes' if row.get('correct') else 'NO'} |"
        )
    lines += ["", "| shape | cuBLAS matmul ms | cuBLAS addmm ms |", "|---|---|---|"]
    for (M, N, K), b in base.items():
        if M > 64:
            lines.append(f"| {M}x{N}x{K} | {b['cuBLAS mm']['median_ms']:.4f} | {b['cuBLAS addmm']['median_ms']:.4f} |")
    return "\n".join(lines)
