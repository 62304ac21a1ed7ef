#!/usr/bin/env python3
"""What the compiler makes of each prefill-attention forward structure for sm_90, without a GPU.

Each structure of ``solkit.kernels.attention.prefill`` (its ``STRUCTURE`` knobs and tiles) and each variant of the
lab's Gluon forward (``lab/kernels/attention_gluon.py``) is compiled for sm_90 by the installed Triton and its
PTX assembled by Triton's bundled ptxas (``-v``). Per variant: registers, spill stores, shared memory, the
``wgmma.wait_group`` depths (0: every wgmma waited for before anything else runs; 1: one left in flight), the
CTA-wide barriers (``bar.sync 0``: a barrier of all the program's warps) and the ``setmaxnreg`` budgets. Run it
with the device's Triton (3.6) first on PYTHONPATH: the numbers differ between compiler versions.

    PYTHONPATH=/path/to/triton-3.6:src python3 lab/benchmarks/attention_codegen.py --out FILE.json
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
from collections import Counter
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # a real compile, not the interpreter
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for lab.kernels

import triton  # noqa: E402
from lab.kernels import attention_gluon as AG  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from solkit.kernels.attention.prefill import attention_fwd_kernel  # noqa: E402

PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
_INTS = [f"stride_{t}{d}" for t in "qkvo" for d in "bhs"] + ["stride_lb", "stride_lh", "seqlen_q", "seqlen_k"]
_CONSTS = ["CAUSAL", "VARLEN", "USE_TMA", "BLOCK_M", "BLOCK_N", "HEAD_DIM", "WARP_SPEC", "SPLIT_DIAG", "FOLD", "LAZY",
           "EAGER", "PIPE"]  # fmt: skip
SIG = {**{n: "*bf16" for n in ("Q", "K", "V", "Out")}, "LSE": "*fp32", "CU": "*fp32", **{n: "i32" for n in _INTS},
       "qk_scale": "fp32", "sm_scale": "fp32", "HEADS_Q": "i32", "GROUP": "i32",
       **{c: "constexpr" for c in _CONSTS}}  # fmt: skip


def triton_cases():
    """``(name, constexpr overrides, num_warps, num_stages)``: the default and each structure knob, causal, d128."""
    base = (128, 64, 8, 3)
    out = [("default 128x64 w8 s3", {}, *base[2:])]
    for name, kw in (("causal_loop=one", {"SPLIT_DIAG": False}), ("exp2_fold=0", {"FOLD": False}),
                     ("rescale=lazy", {"LAZY": True}), ("normalise=eager", {"EAGER": True}),
                     ("pipeline=1", {"PIPE": True}), ("warp_spec=1", {"WARP_SPEC": True})):  # fmt: skip
        out.append((f"{name} 128x64 w8 s3", kw, *base[2:]))
    for bm, bn, w, st in ((64, 64, 4, 3), (64, 64, 4, 2), (128, 128, 8, 2), (64, 128, 4, 2), (128, 32, 4, 3)):
        out.append((f"default {bm}x{bn} w{w} s{st}", {"BLOCK_M": bm, "BLOCK_N": bn}, w, st))
    out.append(("pipeline=1 64x64 w4 s3", {"BLOCK_M": 64, "PIPE": True}, 4, 3))
    return out


def report(compiled) -> dict:
    ptx = compiled.asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as fh:
            fh.write(ptx)
        text = subprocess.run([PTXAS, "-arch=sm_90a", "-v", path, "-o", os.path.join(tmp, "k.o")],
                              capture_output=True, text=True).stderr  # fmt: skip
    regs = re.findall(r"Used (\d+) registers", text)
    spills = re.findall(r"(\d+) bytes spill stores", text)
    return {
        "registers": int(regs[-1]) if regs else None, "spill_store_bytes": int(spills[-1]) if spills else None,
        "shared": compiled.metadata.shared, "num_warps": compiled.metadata.num_warps,
        "wgmma": ptx.count("wgmma.mma_async"),
        "wait_group_depths": dict(Counter(re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx))),
        "cta_barriers": len(re.findall(r"bar\.sync\s+0;", ptx)),
        "setmaxnreg": re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx),
        "ptxas_error": None if regs else text.strip()[-300:],
    }  # fmt: skip


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    doc = {"benchmark": "attention_codegen", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "triton": triton.__version__, "target": "sm_90a", "command": " ".join(["python3", *sys.argv]),
           "note": "compiled without a GPU; causal, head_dim 128, bf16", "rows": []}  # fmt: skip
    base = {"CAUSAL": True, "VARLEN": False, "USE_TMA": True, "BLOCK_M": 128, "BLOCK_N": 64, "HEAD_DIM": 128,
            "WARP_SPEC": False, "SPLIT_DIAG": True, "FOLD": True, "LAZY": False, "EAGER": False,
            "PIPE": False}  # fmt: skip
    for name, kw, warps, stages in triton_cases():
        row = {"kernel": "triton attention_fwd_kernel (tma)", "variant": name}
        try:
            src = ASTSource(fn=attention_fwd_kernel, signature=SIG, constexprs={**base, **kw})
            row.update(report(triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                             options={"num_warps": warps, "num_stages": stages})))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a failing compile is a row
            row["error"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
        doc["rows"].append(row)
        print(json.dumps(row), flush=True)
    for kw in ({}, {"pingpong": True}, {"intra": True, "stages": 3}, {"block_n": 64, "stages": 4, "intra": True},
               {"block_n": 64, "stages": 3}):  # fmt: skip
        row = {"kernel": "lab gluon _attention_fwd_ws_kernel", "variant": json.dumps(kw)}
        try:
            row.update(report(AG.compile_sm90(**kw)))
        except Exception as exc:  # noqa: BLE001 - a failing compile is a row
            row["error"] = f"{type(exc).__name__}: {str(exc)[-300:]}"
        doc["rows"].append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
