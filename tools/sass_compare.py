#!/usr/bin/env python3
"""Compare the machine code of solkit's kernels between a git revision and the working tree, without a GPU.

Each kernel variant is compiled by Triton for sm_90 (``triton.compile`` on an ``ASTSource``, bf16 signatures)
from both trees, in a separate process per tree, and its cubin disassembled with Triton's bundled
``nvdisasm``; the report says per variant whether the PTX (line info and debug labels stripped) and the SASS
(instructions and their encodings) are the same. A refactoring that moves code into shared ``@triton.jit``
helpers should leave the SASS byte-identical: then it cannot change a kernel's speed, and no timing A/B is
needed. Run it with the device's Triton version (numbers of registers and schedules differ between
compilers), e.g. ``PYTHONPATH=/path/to/triton-3.6 python3 tools/sass_compare.py --base HEAD~3``.

    python3 tools/sass_compare.py --base REV [--groups ce,norm_tma,gluon,regs] [--filter NAME] [--out report.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GROUPS = ("ce", "norm_tma", "gluon", "regs")


def _sig(names: str, kind: str) -> dict:
    return {n: kind for n in names.split()}


def _module(*names: str):
    """The first of ``names`` that imports: the kernel modules moved when the kernels were split by family,
    and the base tree of a comparison may predate that."""
    import importlib

    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(f"none of {', '.join(names)}")


def _kernel(mod, *names: str):
    return next(getattr(mod, n) for n in names if hasattr(mod, n))


def cases(groups: set[str]) -> list[tuple]:
    """``(name, kernel, signature, constexprs, num_warps, maxnreg)``; for Gluon ``(name, "gluon", cfg, residual)``."""
    out: list[tuple] = []
    i32, c = "i32", "constexpr"
    if "ce" in groups:
        P = _module("solkit.kernels.cross_entropy.packed", "solkit.kernels._ce_packed")
        S = _module("solkit.kernels.cross_entropy.split", "solkit.kernels.cross_entropy_split")

        tail = {**_sig("n_rows n_cols chunk_cols logits_row_stride grad_row_stride ignore_index", i32),
                **_sig("label_smoothing z_loss_scale", "fp32"), "max_spins": i32}  # fmt: skip
        ptrs = {"logits_ptr": "*bf16", "grad_ptr": "*bf16", "targets_ptr": "*i64", "loss_ptr": "*fp32",
                "lse_ptr": "*fp32", "n_valid_ptr": "*i64", "sync_ptr": "*i32"}  # fmt: skip
        common = dict(SPLIT=32, SPLIT_P2=32, BLOCK=4096, MEAN=1, WRITE_GRAD=1)
        for tagged in (0, 1):
            for hs in (0, 1):
                sig = {**ptrs, "partial_ptr": "*i64" if tagged else "*fp32", **tail,
                       **_sig("SPLIT SPLIT_P2 BLOCK MEAN HAS_SMOOTHING WRITE_GRAD KEEP_EXP PREFETCH TAGGED",
                              c)}  # fmt: skip
                consts = {**common, "HAS_SMOOTHING": hs, "KEEP_EXP": 1, "PREFETCH": 1, "TAGGED": tagged}
                out.append((f"ce split tagged{tagged} smooth{hs}", S._ce_split_kernel, sig, consts, 4, 128))
        wptrs = {**ptrs, "logits_w_ptr": "*i32", "grad_w_ptr": "*i32", "partial_ptr": "*i64", **tail}
        names = "SPLIT SPLIT_P2 BLOCK MEAN HAS_SMOOTHING WRITE_GRAD IS_BF16 ASM"
        for hs in (0, 1):
            for bf in (0, 1):
                base = {**common, "HAS_SMOOTHING": hs, "IS_BF16": bf, "ASM": 1}
                out.append((f"ce reread smooth{hs} bf16{bf}", S._ce_split_reread_kernel,
                            {**wptrs, **_sig(names + " UNROLL", c)}, {**base, "UNROLL": 1}, 4, 128))  # fmt: skip
                for p2 in (0, 1):
                    for full, pf in ((0, 1), (1, 0)):
                        tag = f"smooth{hs} bf16{bf} pass2bf16{p2} full{full} pf{pf}"
                        opts = {"PASS2_BF16": p2, "UNROLL": 1, "FULL": full, "PF": pf}
                        out.append((f"ce packed {tag}", _kernel(P, "ce_packed_kernel", "_ce_split_packed_kernel"),
                                    {**wptrs, **_sig(names + " PASS2_BF16 EARLY_LOAD UNROLL FULL PF", c)},
                                    {**base, **opts, "EARLY_LOAD": 1}, 4, 128))  # fmt: skip
                        out.append((f"ce lean {tag}", _kernel(P, "ce_lean_kernel", "_ce_split_lean_kernel"),
                                    {**wptrs, **_sig(names + " PASS2_BF16 UNROLL FULL PF", c)}, {**base, **opts}, 4,
                                    128))  # fmt: skip
    if "norm_tma" in groups:
        N = _module("solkit.kernels.norms.backward", "solkit.kernels.norm_backward")

        red = {"R": 16, "C": 256, "STAGES": 4, "RED_P": 16, "RED_C": 256}
        for fused in (0, 1):
            for ds in (0, 1):
                sig = {**_sig("dy_ptr ds_ptr x_ptr w_ptr", "*bf16"), "rstd_ptr": "*fp32", "dx_ptr": "*bf16",
                       "dw_partial_ptr": "*fp32", "dw_ptr": "*bf16", "sync_ptr": "*i64", "n_rows": i32,
                       "offset": "fp32", "max_spins": i32,
                       **_sig("HAS_DS GEMMA R C STAGES FUSED RED_P RED_C", c)}  # fmt: skip
                out.append((f"rmsnorm bwd tma ds{ds} fused{fused}", N._rmsnorm_bwd_tma_kernel, sig,
                            {**red, "HAS_DS": ds, "GEMMA": 0, "FUSED": fused}, 8, 128))  # fmt: skip
            for bias in (0, 1):
                sig = {**_sig("dy_ptr x_ptr w_ptr", "*bf16"), **_sig("mean_ptr rstd_ptr", "*fp32"), "dx_ptr": "*bf16",
                       "partial_ptr": "*fp32", "sums_ptr": "*bf16", "sync_ptr": "*i64", "n_rows": i32,
                       "max_spins": i32, **_sig("HAS_BIAS R C STAGES FUSED RED_P RED_C", c)}  # fmt: skip
                out.append((f"layernorm bwd tma bias{bias} fused{fused}", N._layernorm_bwd_tma_kernel, sig,
                            {**red, "HAS_BIAS": bias, "FUSED": fused}, 8, 128))  # fmt: skip
    if "gluon" in groups:
        GG = _module("solkit.kernels.gemm.gluon", "solkit.kernels.gemm_gluon")

        if GG._IMPORT_ERROR is None:
            out += [(f"gluon {g.name} residual{r}", "gluon", g, r, None, None) for g in GG.CONFIGS for r in (0, 1)]
    if "regs" in groups:  # the norm and RoPE variants of lab/benchmarks/kernels_regs.py
        sys.path.insert(0, str(ROOT / "lab" / "benchmarks"))
        import kernels_regs

        out += list(kernels_regs.cases())
    return out


def _strip_ptx(ptx: str) -> str:
    """PTX without line info and debug sections; debug labels (inlining sites) blanked."""
    ptx = ptx.split("\t.section\t.debug", 1)[0]
    lines = [ln for ln in ptx.splitlines() if not re.match(r"\s*\.(loc|file)\s", ln)]
    lines = [re.sub(r"\$L__\w+", "L", ln) for ln in lines if ln.strip()]
    return "\n".join(ln for ln in lines if ln.strip() != "L:")


def dump(out_dir: Path, groups: set[str], name_filter: str = "") -> None:
    """Compile every case (whose name contains ``name_filter``) with the solkit on sys.path; write
    ``<name>.ptx`` / ``<name>.sass`` and index.json."""
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
    out_dir.mkdir(parents=True, exist_ok=True)
    index = {}
    for name, kernel, sig, consts, warps, cap in cases(groups):
        if name_filter not in name:
            continue
        try:
            if kernel == "gluon":
                GG = _module("solkit.kernels.gemm.gluon", "solkit.kernels.gemm_gluon")
                compiled = GG.compile_sm90(sig, has_residual=bool(consts))
            else:
                opts = {"num_warps": warps, **({"maxnreg": cap} if cap else {})}
                compiled = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts),
                                          target=GPUTarget("cuda", 90, 32), options=opts)  # fmt: skip
            stem = re.sub(r"\W+", "_", name)
            (out_dir / f"{stem}.ptx").write_text(_strip_ptx(compiled.asm["ptx"]))
            cubin = out_dir / f"{stem}.cubin"
            cubin.write_bytes(compiled.asm["cubin"])
            text = subprocess.run([str(nvdisasm), "-c", str(cubin)], capture_output=True, text=True).stdout
            cubin.unlink()
            sass = [ln.split("//")[0].rstrip() for ln in text.splitlines() if ln.strip().startswith("/*")]
            (out_dir / f"{stem}.sass").write_text("\n".join(sass))
            index[name] = {"file": stem, "instructions": len(sass)}
        except Exception as exc:  # noqa: BLE001 - a variant that does not compile is a row
            index[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(f"{name}: {index[name].get('instructions', index[name].get('error'))}", flush=True)
    ptxas = subprocess.run([str(nvdisasm.parent / "ptxas"), "--version"], capture_output=True, text=True).stdout
    version = {"triton": triton.__version__, "ptxas": (ptxas.strip().splitlines() or [""])[-1]}
    (out_dir / "index.json").write_text(json.dumps({**version, "cases": index}))


def _tree_src(rev: str, tmp: Path) -> Path:
    """``src/`` of a git revision, unpacked under ``tmp``."""
    archive = tmp / "src.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), rev, "src"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tmp / "tree", filter="data")
    return tmp / "tree" / "src"


def _digest(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()[:12]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD", help="git revision to compare the working tree with")
    ap.add_argument("--groups", default=",".join(GROUPS), help=f"kernel groups, of {', '.join(GROUPS)}")
    ap.add_argument("--filter", default="", help="only variants whose name contains this")
    ap.add_argument("--out", default="", help="write the report as JSON here")
    ap.add_argument("--dump", nargs=2, metavar=("SRC", "DIR"), help=argparse.SUPPRESS)  # the per-tree worker
    args = ap.parse_args()
    groups = set(args.groups.split(","))
    if args.dump:
        sys.path.insert(0, args.dump[0])
        dump(Path(args.dump[1]), groups, args.filter)
        return 0
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        dirs = {}
        for label, src in (("base", _tree_src(args.base, tmp)), ("work", ROOT / "src")):
            dirs[label] = tmp / label
            worker = [sys.executable, __file__, "--groups", args.groups, "--filter", args.filter]
            subprocess.run([*worker, "--dump", str(src), str(dirs[label])], check=True, stdout=subprocess.DEVNULL)
        base = json.loads((dirs["base"] / "index.json").read_text())
        work = json.loads((dirs["work"] / "index.json").read_text())
        rows = []
        for name, w in work["cases"].items():
            b = base["cases"].get(name, {"error": "not in the base tree"})
            row = {"kernel": name}
            if "error" in w or "error" in b:
                row.update(error_base=b.get("error"), error_work=w.get("error"))
            else:
                same = {k: _digest(dirs["base"] / f"{b['file']}.{k}") == _digest(dirs["work"] / f"{w['file']}.{k}")
                        for k in ("ptx", "sass")}  # fmt: skip
                row.update(ptx_same=same["ptx"], sass_same=same["sass"], instructions=w["instructions"],
                           sass_sha1=_digest(dirs["work"] / f"{w['file']}.sass"))  # fmt: skip
            rows.append(row)
            verdict = {k: "same" if row.get(f"{k}_same") else "DIFF" for k in ("ptx", "sass")}
            print(f"{name:60s} ptx {verdict['ptx']}  sass {verdict['sass']}  "
                  f"{row.get('instructions', row.get('error_work'))}")  # fmt: skip
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    doc = {"tool": "sass_compare", "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "triton": work["triton"], "target": "sm_90", "base": args.base, "work_tree_head": head.stdout.strip(),
           "command": " ".join(["python3"] + sys.argv),
           "ptxas": work["ptxas"], "sass_identical": sum(bool(r.get("sass_same")) for r in rows),
           "variants": len(rows), "rows": rows}  # fmt: skip
    print(f"SASS identical for {doc['sass_identical']} of {doc['variants']} variants (Triton {doc['triton']})")
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
