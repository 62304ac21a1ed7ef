#!/usr/bin/env python3
"""Compile solkit's kernels for every NVIDIA architecture without a GPU, and write docs/arch.md.

Triton compiles for any target on a CPU machine (``triton.compile(ASTSource(...), target=GPUTarget("cuda",
cc, 32))``; its NVIDIA backend ships ``ptxas`` for sm_80-sm_89 and ``ptxas-blackwell`` for sm_90 and later).
For each kernel spec in :data:`SPECS` and each architecture in :data:`ARCHS` this records registers per
thread, spill bytes, and shared memory per program, and whether that fits the architecture's shared memory
per block (hardware database). Registers and spills come from the cubin (``cuobjdump -res-usage``: ``REG``,
and ``STACK`` + ``LOCAL``, the per-thread local memory that spills live in), because ``CompiledKernel.n_regs``
and ``n_spills`` are filled only when a driver loads the kernel, which needs a GPU.

    python3 tools/arch_check.py                      # print the compile matrix
    python3 tools/arch_check.py --write docs/arch.md # regenerate the page
    python3 tools/arch_check.py --check docs/arch.md # exit 1 if the page differs (CI)

The page also carries the product table (hardware database) and the what-if SOL table of the built-in
suite's rows (:mod:`solkit.sol.whatif` on :func:`solkit.sol.analysis.analyze_problem`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARCHS = (80, 86, 89, 90, 100, 120)
#: The product whose shared memory per block stands for each architecture in the fit check.
ARCH_PRODUCT = {80: "a100-sxm4-80gb", 86: "rtx-3090", 89: "rtx-4090", 90: "h200-sxm", 100: "b200", 120: "rtx-5090"}
#: Products of the what-if table.
WHAT_IF_PRODUCTS = ("a100-sxm4-80gb", "h100-sxm", "h200-sxm", "b200", "rtx-4090")


@dataclass(frozen=True)
class KernelSpec:
    """One kernel at one launch configuration: ``module:attr`` of its ``@triton.jit`` function (imported
    read-only), the signature of its runtime arguments, its constexprs, warps and stages."""

    name: str
    fn: str
    signature: dict[str, str]
    constexprs: dict[str, Any]
    num_warps: int = 4
    num_stages: int | None = None
    spill_free: bool = True
    aligned: tuple[str, ...] = ()  # arguments the JIT would see as 16-divisible at an aligned launch


def _sig(names: str, kind: str) -> dict[str, str]:
    return {n: kind for n in names.split()}


_RMS_SIG = {**_sig("x_ptr res_ptr w_ptr y_ptr s_ptr", "*bf16"), "rstd_ptr": "*fp32",
            **_sig("n_cols x_stride res_stride y_stride s_stride", "i32"), **_sig("eps offset", "fp32")}  # fmt: skip
_RMS_LOOPED = dict(HAS_RESIDUAL=False, STORE_RSTD=True, GEMMA=False, ONE_CHUNK=True, PREFETCH=False,
                   KEEP="evict_last", DROP="evict_first", OUT_POLICY="", HAS_OFFSET=False)  # fmt: skip
_GATE_SIG = {**_sig("gate_ptr up_ptr out_ptr", "*bf16"),
             **_sig("n_cols blocks_per_row gate_row_stride up_row_stride out_row_stride", "i32")}  # fmt: skip
_ALIGNED = ("x_ptr", "w_ptr", "y_ptr", "n_cols", "x_stride", "y_stride", "gate_ptr", "up_ptr", "out_ptr")

#: The prototype's kernels: the dispatched forward path of rmsnorm (the looped kernel, bf16, no residual) and
#: the gate kernel, each at the launch settings its launcher picks for two widths. Names follow the kernel
#: modules; keep this one table in step when they move.
SPECS = (
    KernelSpec("rmsnorm fwd 4096", "solkit.kernels.norms.rms_norm:_rmsnorm_fwd_looped_kernel", _RMS_SIG,
               {**_RMS_LOOPED, "CHUNK": 4096}, num_warps=8, aligned=_ALIGNED),
    KernelSpec("rmsnorm fwd 8192", "solkit.kernels.norms.rms_norm:_rmsnorm_fwd_looped_kernel", _RMS_SIG,
               {**_RMS_LOOPED, "CHUNK": 8192}, num_warps=16, aligned=_ALIGNED),
    KernelSpec("swiglu fwd 14336", "solkit.kernels.gates.glu:_gated_fwd_kernel", _GATE_SIG,
               {"ACTIVATION": "silu", "BLOCK": 1024, "FAST_TANH": False}, num_warps=4, aligned=_ALIGNED),
    KernelSpec("geglu fwd 14336", "solkit.kernels.gates.glu:_gated_fwd_kernel", _GATE_SIG,
               {"ACTIVATION": "gelu_tanh", "BLOCK": 1024, "FAST_TANH": True}, num_warps=4, aligned=_ALIGNED),
)  # fmt: skip


@dataclass
class CompileResult:
    kernel: str
    arch: int
    ok: bool
    regs: int | None = None
    spill_bytes: int | None = None
    shared: int | None = None
    smem_limit: int | None = None
    error: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.ok and self.shared is not None and self.smem_limit is not None and self.shared <= self.smem_limit


def _jit_fn(path: str):
    module, attr = path.split(":")
    return getattr(importlib.import_module(module), attr)


def _resource_usage(cubin: bytes) -> dict[str, int]:
    """``REG``, ``STACK``, ``SHARED``, ``LOCAL`` of the one kernel in ``cubin`` (Triton's bundled cuobjdump)."""
    from triton.backends.nvidia import compiler as nvc

    exe = Path(nvc.__file__).parent / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(exe), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", out)}


def compile_spec(spec: KernelSpec, arch: int) -> CompileResult:
    """Compile ``spec`` for ``sm_<arch>`` and read its resources; a compile error is recorded, not raised."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from solkit.kernels.common.capability import caps_for_product

    limit = caps_for_product(ARCH_PRODUCT[arch]).smem_per_block
    fn = _jit_fn(spec.fn)
    sig = {**spec.signature, **{k: "constexpr" for k in spec.constexprs}}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if n in spec.aligned}
    src = ASTSource(fn=fn, signature={k: sig[k] for k in fn.arg_names if k in sig}, constexprs=spec.constexprs,
                    attrs=attrs)  # fmt: skip
    options: dict[str, Any] = {"num_warps": spec.num_warps}
    if spec.num_stages is not None:
        options["num_stages"] = spec.num_stages
    try:
        k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as exc:  # any compiler failure is a result of this check, in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return CompileResult(spec.name, arch, False, smem_limit=limit, error=f"{type(exc).__name__}: {first[:160]}")
    use = _resource_usage(k.asm["cubin"])
    shared = int(k.metadata.shared)
    return CompileResult(spec.name, arch, True, use.get("REG"), use.get("STACK", 0) + use.get("LOCAL", 0), shared,
                         limit)  # fmt: skip


def compile_matrix(specs=SPECS, archs=ARCHS) -> list[CompileResult]:
    os.environ.pop("TRITON_INTERPRET", None)  # a real compile, not the interpreter
    return [compile_spec(s, a) for s in specs for a in archs]


def failures(results: list[CompileResult], specs=SPECS) -> list[str]:
    """One line per failure: a compile error, a configuration that does not fit, spills on a spill-free spec."""
    spill_free = {s.name for s in specs if s.spill_free}
    out = []
    for r in results:
        if not r.ok:
            out.append(f"{r.kernel} sm_{r.arch}: compile error: {r.error}")
        elif not r.fits:
            out.append(f"{r.kernel} sm_{r.arch}: {r.shared} B of shared memory, the arch allows {r.smem_limit}")
        elif r.kernel in spill_free and r.spill_bytes:
            out.append(f"{r.kernel} sm_{r.arch}: spills {r.spill_bytes} B per thread")
    return out


def matrix_markdown(results: list[CompileResult]) -> str:
    lines = ["| kernel | arch | registers | spill B | shared B | fits |", "|---|---|---|---|---|---|"]
    for r in results:
        if r.ok:
            lines.append(f"| {r.kernel} | sm_{r.arch} | {r.regs} | {r.spill_bytes} | {r.shared} | "
                         f"{'yes' if r.fits else f'no (> {r.smem_limit})'} |")  # fmt: skip
        else:
            lines.append(f"| {r.kernel} | sm_{r.arch} | - | - | - | compile error: {r.error} |")
    return "\n".join(lines) + "\n"


def products_markdown() -> str:
    from solkit.hardware.specs import cc_limits, list_specs

    lines = ["| product | cc | SMs | shared/SM KB | shared/block KB | regs/SM | L2 MiB | TMA | wgmma | Gluon Hopper |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    yn = {True: "yes", False: "no"}
    for s in list_specs():
        lim = cc_limits(s.compute_capability)
        if lim is None:
            continue
        lines.append(
            f"| {s.id} | {s.compute_capability} | {int(s.sm_count.value)} | {int(lim.smem_per_sm_bytes.value) // 1024}"
            f" | {int(lim.smem_per_block_bytes.value) // 1024} | {int(lim.regs_per_sm.value)}"
            f" | {s.l2_bytes.value / 2**20:.1f} | {yn[lim.tma.value]} | {yn[lim.wgmma.value]}"
            f" | {yn[lim.gluon_hopper.value]} |"
        )
    return "\n".join(lines) + "\n"


def suite_rows():
    """One :class:`~solkit.sol.whatif.WorkRow` per workload of the built-in suite, from the analysis."""
    from solkit.bench.runner import suite_problems
    from solkit.sol.analysis import analyze_problem
    from solkit.sol.whatif import WorkRow

    rows = []
    for problem in suite_problems():
        for w in analyze_problem(problem):
            axes = ",".join(f"{k}={v}" for k, v in sorted(w.axes.items()))
            row = WorkRow(f"{problem.name} [{axes}]", dict(w.analysis.flops), w.analysis.fused_bytes)
            same = [r for r in rows if r.name.split(" #")[0] == row.name]
            if any(r.flops == row.flops and r.bytes == row.bytes for r in same):
                continue  # workloads that differ only in what the analysis does not count (e.g. scalar inputs)
            if same:  # same axes, different work (e.g. another dtype): number them
                row = WorkRow(f"{row.name} #{len(same) + 1}", row.flops, row.bytes)
            rows.append(row)
    return rows


def whatif_markdown() -> str:
    from solkit.sol.whatif import markdown_table

    return markdown_table(suite_rows(), WHAT_IF_PRODUCTS)


def render(results: list[CompileResult]) -> str:
    import triton

    fails = "\n".join(f"- {f}" for f in failures(results)) or "none"
    return PAGE.format(triton=triton.__version__, products=products_markdown(), whatif=whatif_markdown(),
                       matrix=matrix_markdown(results), failures=fails)  # fmt: skip


PAGE = """<!-- generated by tools/arch_check.py --write docs/arch.md; CI checks it with --check -->
# solkit across NVIDIA architectures

## The capability model

`solkit.kernels.common.capability` says what a device offers and what a kernel path needs:

* `DeviceCaps` (compute capability, SM count, shared memory per SM and per program, register file, L2, and
  the features TMA, wgmma and Gluon's Hopper ops), from a hardware-database product
  (`caps_for_product("h200-sxm")`) or a live device (`caps_for_device(x.device)`: its properties, the
  database for the features). The CPU and Triton's interpreter get `INTERPRETER_CAPS`: no compute
  capability and no features, so only portable paths run there.
* `Needs(min_cc, max_cc, tma, wgmma, gluon, smem_bytes, max_regs, warps, note)` for one path;
  `unmet(needs, caps)` gives one short reason per unmet need.
* `choose(paths, caps)` takes the first path (fastest first) whose needs are met; the last path must be the
  portable Triton path (no compute-capability or feature needs), so one always exists.

Features follow the compute capability: TMA from sm_90 on; wgmma and Gluon's Hopper ops on sm_90 only
(sm_90a instructions: sm_100 has tcgen05 instead, and sm_120 has neither).

## Products (hardware database)

{products}
The sm_120 shared-memory figures are marked low-confidence in the database: read the device property on a
5090 to confirm.

## What-if SOL of the built-in suite

T_SOL on each product's datasheet ceilings (dense peaks, bandwidth) for the FLOPs and fused bytes of each
suite workload (`solkit.sol.analysis`); C = compute-bound, M = memory-bound; a star marks a row whose bound
changes between these products. These are lower bounds per product: measured times do not transfer.

{whatif}
## Compile matrix (prototype)

Each kernel at its launcher's settings for one width, compiled by Triton for each architecture on a CPU
machine. Registers per thread and spill bytes (stack + local) from the cubin; shared memory per program from
Triton's metadata; fits = at most the architecture's shared memory per block (of the product standing for
the architecture, `ARCH_PRODUCT` in the tool). Compiled with Triton {triton}: registers change with the
compiler version, so `--check` is meant for the Triton the project pins.

{matrix}
Failures (compile error, does not fit, spills on a spill-free kernel): {failures}
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", metavar="PATH", help="write the page")
    g.add_argument("--check", metavar="PATH", help="exit 1 if the page differs from a fresh one")
    args = ap.parse_args(argv)
    results = compile_matrix()
    if not (args.write or args.check):
        print(matrix_markdown(results), end="")
        for f in failures(results):
            print("FAIL", f)
        return 1 if failures(results) else 0
    page = render(results)
    if args.write:
        Path(args.write).write_text(page)
        return 1 if failures(results) else 0
    if Path(args.check).read_text() != page:
        print(f"{args.check} is out of date: run python3 tools/arch_check.py --write {args.check}", file=sys.stderr)
        return 1
    return 1 if failures(results) else 0


if __name__ == "__main__":
    sys.exit(main())
