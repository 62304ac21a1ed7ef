"""Registers and spills of solkit's norm, softmax and RoPE kernels for sm_90a, from ptxas, without a GPU.

Each kernel is compiled by Triton for an sm_90 target (``triton.compile`` on an ``ASTSource``, bf16
signatures, the launch options of the configuration) and its PTX assembled by Triton's bundled ptxas
with ``-v``; the report holds the registers per thread and the bytes of spill stores. This is how the
8192-wide backward settings were chosen before the GPU sweep confirmed them (docs/kernels/norms.md):
a persistent backward that spills is slow however its loads are scheduled. Run it with the Triton
version of the device (the numbers differ between compiler versions).

    python3 lab/benchmarks/kernels_regs.py --out regs.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)  # a real compile, not the interpreter

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from solkit.kernels.common.rows import register_cap  # noqa: E402
from solkit.kernels.norms.backward import rmsnorm_bwd_kernel as _rmsnorm_bwd_kernel  # noqa: E402
from solkit.kernels.norms.layer_norm import _layernorm_bwd_kernel, _layernorm_fwd_kernel  # noqa: E402
from solkit.kernels.norms.rms_norm import _rmsnorm_fwd_kernel  # noqa: E402
from solkit.kernels.rope.rotary import _rope_kernel  # noqa: E402

PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
I32, C = "i32", "constexpr"


def _sig(names: str, kind: str) -> dict:
    return {n: kind for n in names.split()}


LN_BWD = {**_sig("dy_ptr x_ptr w_ptr", "*bf16"), **_sig("mean_ptr rstd_ptr", "*fp32"), "dx_ptr": "*bf16",
          "partial_ptr": "*fp32", "sums_ptr": "*bf16", "sync_ptr": "*i64",
          **_sig("n_rows n_cols dy_stride x_stride dx_stride max_spins", I32),
          **_sig("HAS_BIAS PREFETCH BLOCK_M BLOCK_N", C)}  # fmt: skip
RMS_BWD = {**_sig("dy_ptr ds_ptr x_ptr w_ptr", "*bf16"), "rstd_ptr": "*fp32", "dx_ptr": "*bf16",
           "dw_partial_ptr": "*fp32", "dw_ptr": "*bf16", "sync_ptr": "*i64",
           **_sig("n_rows n_cols dy_stride ds_stride x_stride dx_stride", I32), "offset": "fp32", "max_spins": I32,
           **_sig("HAS_DS GEMMA PREFETCH BLOCK_M BLOCK_N", C)}  # fmt: skip
RMS_FWD = {**_sig("x_ptr res_ptr w_ptr y_ptr s_ptr", "*bf16"), "rstd_ptr": "*fp32",
           **_sig("n_rows n_cols x_stride res_stride y_stride s_stride", I32), **_sig("eps offset", "fp32"),
           **_sig("HAS_RESIDUAL STORE_RSTD GEMMA PERSISTENT BLOCK_M BLOCK_N", C)}  # fmt: skip
LN_FWD = {**_sig("x_ptr w_ptr b_ptr y_ptr", "*bf16"), **_sig("mean_ptr rstd_ptr", "*fp32"),
          **_sig("n_rows n_cols x_stride y_stride", I32), "eps": "fp32",
          **_sig("HAS_BIAS STORE_STATS ONE_PASS BLOCK_M BLOCK_N", C)}  # fmt: skip
ROPE = {**_sig("q_ptr k_ptr q_out_ptr k_out_ptr cos_ptr sin_ptr pos_ptr", "*bf16"),
        **_sig("n_tokens seq_len n_q_heads n_k_heads q_sb q_ss q_sh k_sb k_ss k_sh qo_sb qo_ss qo_sh ko_sb ko_ss "
               "ko_sh cos_sb cos_ss sin_sb sin_ss pos_sb pos_ss", I32),
        **_sig("HALF BLOCK_T BLOCK_HQ BLOCK_HK INTERLEAVED BACKWARD HAS_POS", C)}  # fmt: skip


def cases():
    """``(name, kernel, signature, constexprs, num_warps, maxnreg)`` for every reported configuration."""
    out = []
    for n in (4096, 8192):
        for warps, per_sm, pf in ((8, 2, 1), (16, 2, 1), (16, 1, 1), (16, 1, 2), (32, 1, 1), (32, 1, 2)):
            cap = register_cap(per_sm, warps)
            tag = f"{n} cols, {warps} warps, {per_sm}/SM, prefetch {pf}"
            out.append((f"layernorm bwd, {tag}", _layernorm_bwd_kernel, LN_BWD,
                        {"HAS_BIAS": True, "PREFETCH": pf, "BLOCK_M": 1, "BLOCK_N": n}, warps, cap))  # fmt: skip
            for ds in (False, True):
                consts = {"HAS_DS": ds, "GEMMA": False, "PREFETCH": pf, "BLOCK_M": 1, "BLOCK_N": n}
                name = f"{'add_' if ds else ''}rmsnorm bwd, {tag}"
                out.append((name, _rmsnorm_bwd_kernel, RMS_BWD, consts, warps, cap))
    fwd_cfgs = (
        (False, 2, 4096, 8, None), (False, 1, 4096, 8, 32), (False, 2, 4096, 16, 32), (False, 1, 8192, 8, None),
        (False, 1, 8192, 16, None), (False, 1, 8192, 16, 40), (False, 1, 8192, 32, 32), (True, 1, 4096, 4, None),
        (True, 1, 4096, 8, 40), (True, 1, 8192, 8, None), (True, 1, 8192, 16, 40), (True, 1, 8192, 32, 32),
    )  # fmt: skip
    for res, bm, n, warps, cap in fwd_cfgs:
        consts = {"HAS_RESIDUAL": res, "STORE_RSTD": False, "GEMMA": False, "PERSISTENT": False, "BLOCK_M": bm,
                  "BLOCK_N": n}  # fmt: skip
        name = f"{'add_' if res else ''}rmsnorm fwd, {bm} x {n}, {warps} warps, maxnreg {cap}"
        out.append((name, _rmsnorm_fwd_kernel, RMS_FWD, consts, warps, cap))
    for bm, n, warps, cap in ((2, 4096, 8, None), (1, 8192, 8, None), (1, 8192, 16, None), (1, 8192, 32, 32)):
        out.append((f"layernorm fwd, {bm} x {n}, {warps} warps, maxnreg {cap}", _layernorm_fwd_kernel, LN_FWD,
                    {"HAS_BIAS": True, "STORE_STATS": False, "ONE_PASS": True, "BLOCK_M": bm, "BLOCK_N": n},
                    warps, cap))  # fmt: skip
    for bt, hq, hk, warps, cap in ((1, 32, 8, 8, None), (1, 64, 8, 8, None), (1, 64, 8, 16, None),
                                   (1, 64, 8, 16, 40), (1, 64, 8, 32, None), (1, 32, 4, 8, None), (1, 16, 2, 4, None),
                                   (2, 64, 8, 16, None)):  # fmt: skip
        consts = {"HALF": 64, "BLOCK_T": bt, "BLOCK_HQ": hq, "BLOCK_HK": hk, "INTERLEAVED": False, "BACKWARD": False,
                  "HAS_POS": False}  # fmt: skip
        name = f"rope fwd, {bt} token(s) x ({hq} + {hk}) heads x 128, {warps} warps, maxnreg {cap}"
        out.append((name, _rope_kernel, ROPE, consts, warps, cap))
    return out


def ptxas_report(kernel, signature, constexprs, num_warps, maxnreg) -> dict:
    """Compile for sm_90 and assemble with ``ptxas -v``: registers per thread and spill-store bytes."""
    opts = {"num_warps": num_warps, **({"maxnreg": maxnreg} if maxnreg else {})}
    compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs),
                              target=GPUTarget("cuda", 90, 32), options=opts)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "k.ptx")
        with open(ptx, "w") as fh:
            fh.write(compiled.asm["ptx"])
        cmd = [PTXAS, "-arch=sm_90a", "-v", ptx, "-o", os.path.join(tmp, "k.o")]
        if maxnreg:
            cmd.insert(1, f"--maxrregcount={maxnreg}")
        text = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    regs = re.findall(r"Used (\d+) registers", text)
    spills = re.findall(r"(\d+) bytes spill stores", text)
    return {"registers": int(regs[-1]) if regs else None, "spill_store_bytes": int(spills[-1]) if spills else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--filter", default="", help="only configurations whose name contains this")
    args = ap.parse_args()
    ptxas_version = subprocess.run([PTXAS, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    doc = {"benchmark": "kernels_regs", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "triton": triton.__version__, "ptxas": ptxas_version[-1] if ptxas_version else None, "target": "sm_90a",
           "command": " ".join(["python3"] + sys.argv), "rows": []}  # fmt: skip
    for name, kernel, sig, consts, warps, cap in cases():
        if args.filter and args.filter not in name:
            continue
        row = {"kernel": name, "num_warps": warps, "maxnreg": cap}
        try:
            row.update(ptxas_report(kernel, sig, consts, warps, cap))
        except Exception as exc:  # noqa: BLE001 - a failing compile is a row
            row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        doc["rows"].append(row)
        print(f"{name:80s} regs={row.get('registers')} spills={row.get('spill_store_bytes')} {row.get('error', '')}",
              flush=True)  # fmt: skip
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
