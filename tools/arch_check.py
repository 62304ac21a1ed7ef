#!/usr/bin/env python3
"""Compile every public kernel's dispatched path for every NVIDIA architecture without a GPU; docs/arch.md.

For each architecture in :data:`ARCHS` the product standing for it (:data:`ARCH_PRODUCT`) is simulated on a
fake CUDA device (``capability.simulate`` and torch's fake tensors, with ``torch.cuda``'s device queries
answering that product), and each workload of :data:`WORKLOADS` (a public kernel at one shape) is run through
the product's own dispatcher. Triton launches are recorded instead of run: Triton's own binder gives each
launch's signature, specialisation and options for that target, so what is compiled is exactly what the
dispatcher would launch there (its path, its tuned configuration, and for an autotuned kernel every config the
tuner would try). The distinct compiles then run in a process pool (``triton.compile`` with
``GPUTarget("cuda", cc, 32)``): registers and spills (``STACK`` + ``LOCAL``) come from the cubin
(``cuobjdump -res-usage``; ``CompiledKernel.n_regs`` needs a driver), shared memory from Triton's metadata.

A row fails on a compile error, a dispatcher error, shared memory over the architecture's per-block limit,
registers over the register file for the program's warps, or spills in a kernel of :data:`SPILL_FREE`.

    python3 tools/arch_check.py                      # print the matrix and the failures
    python3 tools/arch_check.py --write docs/arch.md # regenerate the generated blocks of the page
    python3 tools/arch_check.py --check docs/arch.md # CI: exit 1 on a failure or a page out of date

Only the blocks between ``<!-- arch_check:begin NAME -->`` and ``<!-- arch_check:end NAME -->`` are written;
the rest of the page is prose kept as it is. ``--check`` compares path, fits, spills and compile status
strictly, and registers and shared memory only when the Triton version equals the one the page names.

(Over 500 lines: the capture of launches, the compile pool and the page are one pipeline with one table of
workloads; split, each part would need the others' records.)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
ARCHS = (80, 86, 89, 90, 100, 120)
#: The product whose capabilities (SM count, shared memory, register file, L2) stand for each architecture.
ARCH_PRODUCT = {80: "a100-sxm4-80gb", 86: "rtx-3090", 89: "rtx-4090", 90: "h200-sxm", 100: "b200", 120: "rtx-5090"}
#: Products of the what-if table.
WHAT_IF_PRODUCTS = ("a100-sxm4-80gb", "h100-sxm", "h200-sxm", "b200", "rtx-4090")

#: Kernels whose rows are held in registers by design (one row or a packed group of rows per program): a spill
#: there is a configuration that is wrong for the architecture, so it fails the check. Other kernels loop over
#: columns and may spill without being wrong; their spills are reported, not failed.
SPILL_FREE = frozenset({
    "_rmsnorm_fwd_kernel", "_rmsnorm_fwd_looped_kernel", "_layernorm_fwd_kernel", "_gated_fwd_kernel",
    "_gated_bwd_kernel", "_rope_kernel", "softmax_fwd_packed_kernel", "softmax_bwd_packed_kernel",
    "ce_packed_kernel",
})  # fmt: skip


# --------------------------------------------------------------------------------------------- workloads
@dataclass(frozen=True)
class Workload:
    """A public kernel (the name of its ``PATHS`` entry) at one shape; ``run(torch)`` calls it on fake tensors.
    ``backward``: the launches of interest are those of the backward pass (``run`` returns what to differentiate,
    and the forward's launches are dropped)."""

    kernel: str
    shape: str
    run: Callable[[Any], Any]
    backward: bool = False


def _t(torch, *shape, dtype=None, grad=False):
    """A fake bf16 CUDA tensor. ``grad`` is not set on it: autograd Functions are run by hand (:func:`_backward`)
    because torch's autograd engine needs a CUDA build for CUDA leaves, fake or not."""
    return torch.randn(*shape, dtype=dtype or torch.bfloat16, device="cuda")


def _gemm(m, n, k):
    return lambda torch: __import__("solkit.kernels", fromlist=["gemm"]).gemm(_t(torch, m, k), _t(torch, n, k))


def _rows(fn_name, n_rows, n_cols, extra=(), grad=False):
    """``fn(x, *extra)`` of :mod:`solkit.kernels` with ``x`` (rows, cols) and 1-D extras of ``n_cols``."""

    def run(torch):
        import solkit.kernels as K

        x = _t(torch, n_rows, n_cols, grad=grad)
        args = [_t(torch, n_rows, n_cols, grad=grad) if e == "rows" else _t(torch, n_cols, grad=grad) for e in extra]
        return getattr(K, fn_name)(x, *args)

    return run


def _ce(n_rows, vocab, grad):
    def run(torch):
        from solkit.kernels import cross_entropy

        logits = _t(torch, n_rows, vocab, grad=grad)
        return cross_entropy(logits, torch.randint(0, vocab, (n_rows,), device="cuda"))

    return run


def _flce(n_rows, hidden, vocab, grad):
    def run(torch):
        from solkit.kernels import fused_linear_cross_entropy

        h, w = _t(torch, n_rows, hidden, grad=grad), _t(torch, vocab, hidden, grad=grad)
        return fused_linear_cross_entropy(h, w, torch.randint(0, vocab, (n_rows,), device="cuda"))

    return run


def _rope(seq, heads_q, heads_k, grad):
    def run(torch):
        from solkit.kernels import apply_rope

        q, k = _t(torch, 1, seq, heads_q, 128, grad=grad), _t(torch, 1, seq, heads_k, 128, grad=grad)
        return apply_rope(q, k, _t(torch, seq, 128), _t(torch, seq, 128))

    return run


def _attention(heads_q, seq, grad):
    """Causal GQA prefill attention, 8 kv heads, head_dim 128, (1, heads, seq, 128)."""

    def run(torch):
        from solkit.kernels import attention

        q, k, v = (_t(torch, 1, h, seq, 128, grad=grad) for h in (heads_q, 8, 8))
        return attention(q, k, v, causal=True)

    return run


def _embedding(n_ids, vocab, hidden, grad):
    def run(torch):
        from solkit.kernels import embedding

        return embedding(torch.randint(0, vocab, (n_ids,), device="cuda"), _t(torch, vocab, hidden, grad=grad))

    return run


def _decode(batch, kv_len, heads_q):
    """Paged decode attention: one new token per sequence, 8 kv heads, head_dim 128, blocks of 16 tokens."""

    def run(torch):
        from solkit.kernels import decode_attention

        blocks = kv_len // 16
        table = torch.arange(batch * blocks, device="cuda", dtype=torch.int32).reshape(batch, blocks)
        kc, vc = (_t(torch, batch * blocks, 16, 8, 128) for _ in range(2))
        lens = torch.full((batch,), kv_len, device="cuda", dtype=torch.int32)
        return decode_attention(_t(torch, batch, 1, heads_q, 128), kc, vc, lens, table, max_seq_len=kv_len)

    return run


def _both(kernel, shape, make, fwd="_fwd"):
    """The forward and the backward workload of ``kernel`` (``make(grad)`` gives the call); the forward is
    ``kernel + fwd`` (its ``PATHS`` name: the cross-entropy kernels name the forward by the kernel alone)."""
    return [Workload(f"{kernel}{fwd}", shape, make(False)), Workload(f"{kernel}_bwd", shape, make(True), True)]


def _workloads() -> list[Workload]:
    """Llama-3-8B and 70B widths: hidden 4096/8192, MLP 14336/28672, vocabulary 128256, 8192 tokens;
    the GEMM at prefill (M=8192) and decode (M=16) sizes."""
    out: list[Workload] = []
    for m, nk in ((8192, 4096), (8192, 8192), (16, 4096), (16, 8192)):
        out.append(Workload("gemm", f"M{m} N{nk} K{nk}", _gemm(m, nk, nk)))
    for hidden, mlp, heads in ((4096, 14336, 32), (8192, 28672, 64)):
        rows = f"8192x{hidden}"
        out += _both("rmsnorm", rows, lambda g, h=hidden: _rows("rmsnorm", 8192, h, ("w",), g))
        out += _both("add_rmsnorm", rows, lambda g, h=hidden: _rows("add_rmsnorm", 8192, h, ("rows", "w"), g))
        out += _both("layernorm", rows, lambda g, h=hidden: _rows("layernorm", 8192, h, ("w", "w"), g))
        out += _both("softmax", rows, lambda g, h=hidden: _rows("softmax", 8192, h, (), g))
        out += _both("rope", f"8192x{heads}x128 (k 8 heads)", lambda g, n=heads: _rope(8192, n, 8, g))
        out += _both("swiglu", f"8192x{mlp}", lambda g, w=mlp: _rows("swiglu", 8192, w, ("rows",), g))
        out += _both("geglu", f"8192x{mlp}", lambda g, w=mlp: _rows("geglu", 8192, w, ("rows",), g))
        out += _both("fused_linear_cross_entropy", f"8192x{hidden} V128256",
                     lambda g, h=hidden: _flce(8192, h, 128256, g), fwd="")  # fmt: skip
        out += _both("attention", f"1x{heads}x8192x128 (kv 8, causal)", lambda g, n=heads: _attention(n, 8192, g))
        out += _both("embedding", f"8192 ids, 128256x{hidden}", lambda g, h=hidden: _embedding(8192, 128256, h, g))
    for batch, kv_len in ((1, 32768), (64, 8192)):
        out.append(
            Workload("decode_attention", f"b{batch} kv{kv_len} 32x128 (kv 8, paged)", _decode(batch, kv_len, 32))
        )
    out += _both("softmax", "8192x128256", lambda g: _rows("softmax", 8192, 128256, (), g))
    for rows in (8192, 1024):
        out += _both("cross_entropy", f"{rows}x128256", lambda g, r=rows: _ce(r, 128256, g), fwd="")
    return out


WORKLOADS = _workloads()


# --------------------------------------------------------------------------------------------- capture
@dataclass
class Launch:
    """One recorded Triton launch: what :func:`compile_launch` needs to compile it, as plain data."""

    fn: str  # module:name of the @triton.jit (or Gluon) function
    gluon: bool
    signature: dict[str, str]
    constexprs: dict[tuple, Any]
    attrs: dict[tuple, Any]
    options: dict[str, Any]

    def key(self, arch: int) -> str:
        opts = {k: v for k, v in sorted(self.options.items()) if k not in ("debug",)}
        return repr((self.fn, sorted(self.signature.items()), sorted(self.constexprs.items(), key=repr),
                     sorted(self.attrs.items(), key=repr), sorted(opts.items(), key=repr), arch))  # fmt: skip

    @property
    def name(self) -> str:
        return self.fn.split(":")[1]


def _fake_props(caps) -> SimpleNamespace:
    return SimpleNamespace(
        name=caps.name, major=caps.cc[0], minor=caps.cc[1], multi_processor_count=caps.sm_count,
        L2_cache_size=caps.l2_bytes or 0, shared_memory_per_block_optin=caps.smem_per_block,
        shared_memory_per_multiprocessor=caps.smem_per_sm, regs_per_multiprocessor=caps.regs_per_sm,
        total_memory=80 * 2**30, warp_size=32, max_threads_per_multi_processor=2048,
    )  # fmt: skip


def _recorder(arch: int, sink: list[Launch]):
    """A stand-in for ``JITFunction.run``: Triton's binder and argument packing for ``sm_<arch>``, recorded."""
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", arch, 32))

    def run(self, *args, grid, warmup=False, **kwargs):
        kwargs["debug"] = kwargs.get("debug", self.debug) or knobs.runtime.debug
        binder = create_function_from_signature(self.signature, self.params, backend)
        bound, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = self._pack_args(backend, kwargs, bound, specialization, options)
        fn = f"{self.module}:{self.fn.__name__}"
        sink.append(Launch(fn, bool(self.is_gluon()), dict(signature), dict(constexprs), dict(attrs),
                           dict(options.__dict__)))  # fmt: skip
        return _LazyKernel(sink[-1], arch)

    return run


class _LazyKernel:
    """What a recorded launch returns: a compiled kernel whose resources, when a dispatcher asks for them (an
    occupancy-sized grid), come from compiling the launch for the simulated arch right then."""

    def __init__(self, launch: Launch, arch: int):
        self._launch, self._arch, self._res = launch, arch, None

    def _init_handles(self):
        pass

    def _resources(self) -> dict:
        if self._res is None:
            self._res = compile_launch(self._launch, self._arch)
            if not self._res["ok"]:
                raise RuntimeError(self._res["error"])
        return self._res

    n_regs = property(lambda self: self._resources()["regs"])
    n_spills = property(lambda self: self._resources()["spill"])
    metadata = property(lambda self: SimpleNamespace(shared=self._resources()["shared"]))


def _index(t, idx):
    """``t[idx]`` for ints, slices, None, Ellipsis and 1-D index tensors through view ops (torch's C++ indexing
    asks for a CUDA device guard, which a CPU build of torch lacks even for fake tensors)."""
    import torch

    idx = idx if isinstance(idx, tuple) else (idx,)
    out, dim = t, 0
    for n, i in enumerate(idx):
        if i is None:
            out, dim = out.unsqueeze(dim), dim + 1
        elif i is Ellipsis:
            dim = out.dim() - sum(1 for j in idx[n + 1 :] if j is not None and j is not Ellipsis)
        elif isinstance(i, slice):
            start, stop, step = i.indices(out.shape[dim])
            out, dim = torch.ops.aten.slice(out, dim, start, max(stop, start), step), dim + 1
        elif isinstance(i, torch.Tensor) and i.dtype != torch.bool and i.dim() == 1:
            out, dim = out.index_select(dim, i), dim + 1
        else:
            out = out.select(dim, int(i))
    return out


def _setitem(t, idx, value):
    view = _index(t, idx)
    view.copy_(value) if hasattr(value, "shape") else view.fill_(value)


class _Ctx:
    """The ``ctx`` of an autograd Function run by hand (torch's autograd needs a real CUDA build for fake CUDA
    leaves): saved tensors and attributes, every input wanting a gradient."""

    def __init__(self, n_inputs: int):
        self.needs_input_grad = (True,) * n_inputs
        self.saved_tensors: tuple = ()

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *_):
        pass

    def mark_dirty(self, *_):
        pass

    def set_materialize_grads(self, *_):
        pass


def _apply_by_hand(tape: list):
    """A stand-in for ``Function.apply``: the forward with a :class:`_Ctx`, taped for :func:`_backward`."""

    def apply(cls, *args, **kwargs):
        ctx = _Ctx(len(args))
        out = cls.forward(ctx, *args, **kwargs)
        tape.append((cls, ctx, out))
        return out

    return classmethod(apply)


def _backward(tape: list) -> None:
    """Run the taped Functions' backwards, last first, with a gradient of ones for every tensor output."""
    import torch

    for cls, ctx, out in reversed(tape):
        outs = out if isinstance(out, tuple) else (out,)
        cls.backward(ctx, *[torch.ones_like(o) if isinstance(o, torch.Tensor) else None for o in outs])


def _bench_all(self, *args, config, **meta):
    """``Autotuner._bench`` without timing: run (so record) the config; every config the tuner tries is kept."""
    self.fn.run(*args, **meta, **config.all_kwargs())
    return [0.0, 0.0, 0.0]


@contextlib.contextmanager
def fake_device(arch: int, sink: list[Launch], tape: list):
    """A CUDA device that is ``ARCH_PRODUCT[arch]``: fake tensors, torch.cuda queries, simulated capabilities,
    Triton launches recorded into ``sink`` and autograd Functions run by hand onto ``tape``."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    from solkit.kernels.common.capability import caps_for_product, simulate
    from solkit.kernels.common.ops import run_by_hand

    caps = caps_for_product(ARCH_PRODUCT[arch])
    props = _fake_props(caps)
    with contextlib.ExitStack() as stack:
        for name, value in (("is_available", lambda: True), ("device_count", lambda: 1),
                            ("current_device", lambda: 0), ("get_device_properties", lambda *a, **k: props),
                            ("get_device_capability", lambda *a, **k: caps.cc),
                            ("current_stream", lambda *a, **k: SimpleNamespace(cuda_stream=0))):  # fmt: skip
            stack.enter_context(mock.patch.object(torch.cuda, name, value))
        stack.enter_context(mock.patch.object(JITFunction, "run", _recorder(arch, sink)))
        stack.enter_context(mock.patch.object(torch.autograd.Function, "apply", _apply_by_hand(tape)))
        stack.enter_context(mock.patch.object(torch.Tensor, "__getitem__", _index))
        stack.enter_context(mock.patch.object(torch.Tensor, "__setitem__", _setitem))
        stack.enter_context(mock.patch.object(Autotuner, "_bench", _bench_all))
        stack.enter_context(mock.patch.object(Autotuner, "check_disk_cache", lambda self, k, c, bench: bench()))
        stack.enter_context(mock.patch.dict(os.environ, {"SOLKIT_GEMM_TUNER": "triton"}))
        stack.enter_context(simulate(caps))
        stack.enter_context(run_by_hand())  # the launchers themselves, not the custom ops' fake implementations
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        yield caps


def _described_paths(caps) -> dict[str, str]:
    """The path each public kernel takes on ``caps`` by the capability model (``solkit.kernels.paths``), when
    the families declare their paths; {} before that."""
    try:
        from solkit.kernels.paths import describe
    except ImportError:
        return {}
    return {k: v["path"] for k, v in describe(caps).items()}


def capture_arch(arch: int, only: list[tuple[str, str]] | None = None) -> dict:
    """Run every workload (or those whose (kernel, shape) is in ``only``) on the fake ``sm_<arch>`` device:
    ``{"launches": {(kernel, shape): [Launch]}, "errors": {(kernel, shape): str}, "paths": {kernel: path}}``.
    Runs in a fresh process (the product caches per device)."""
    os.environ.pop("TRITON_INTERPRET", None)
    launches: dict[tuple[str, str], list[Launch]] = {}
    errors: dict[tuple[str, str], str] = {}
    sink: list[Launch] = []
    tape: list = []
    with fake_device(arch, sink, tape) as caps:
        import torch

        paths = _described_paths(caps)
        for w in [w for w in WORKLOADS if only is None or (w.kernel, w.shape) in only]:
            sink.clear()
            tape.clear()
            try:
                w.run(torch)
                if w.backward:
                    sink.clear()
                    _backward(tape)
            except Exception as exc:  # a dispatcher that fails on this arch is a result, in one line
                errors[(w.kernel, w.shape)] = _one_line(exc)
            launches[(w.kernel, w.shape)] = list(sink)
    return {"launches": launches, "errors": errors, "paths": paths}


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:160] if text else ''}"


# --------------------------------------------------------------------------------------------- compile
def _resource_usage(cubin: bytes) -> dict[str, int]:
    """``REG``, ``STACK``, ``SHARED``, ``LOCAL`` of the one kernel in ``cubin`` (Triton's bundled cuobjdump)."""
    from triton.backends.nvidia import compiler as nvc

    exe = Path(nvc.__file__).parent / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(exe), "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", out)}


def compile_launch(launch: Launch, arch: int) -> dict:
    """Compile one recorded launch for ``sm_<arch>``: ``{"ok", "regs", "spill", "shared", "warps", "error"}``."""
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    module, name = launch.fn.split(":")
    fn = getattr(importlib.import_module(module), name)
    if launch.gluon:
        from triton.experimental.gluon._runtime import GluonASTSource as source_cls
    else:
        source_cls = ASTSource
    warps = int(launch.options.get("num_warps", 4))
    try:
        src = source_cls(fn, launch.signature, launch.constexprs, launch.attrs)
        k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=launch.options)
        use = _resource_usage(k.asm["cubin"])
    except Exception as exc:  # any compiler failure is a result of this check, in one line
        return {"ok": False, "error": _one_line(exc), "warps": warps}
    return {"ok": True, "regs": use.get("REG"), "spill": use.get("STACK", 0) + use.get("LOCAL", 0),
            "shared": int(k.metadata.shared), "warps": warps, "error": ""}  # fmt: skip


def _compile_star(job):
    return compile_launch(*job)


# --------------------------------------------------------------------------------------------- the matrix
@dataclass
class Row:
    """One (kernel, shape, arch): the launched kernels and their worst resources over the launches."""

    kernel: str
    shape: str
    arch: int
    path: str = "-"  # the capability model's path for the kernel on this arch ("-" before PATHS exist)
    launched: str = ""  # the jit functions the dispatcher launched (xN: N configs of an autotuned kernel)
    ok: bool = True
    regs: int | None = None
    spill: int = 0
    shared: int | None = None
    smem_limit: int | None = None
    fits: bool = True
    spill_free: bool = False
    errors: list[str] = field(default_factory=list)


def fit_problems(res: dict, caps) -> list[str]:
    """Why one compiled kernel does not fit ``caps``: shared memory per block, registers per program."""
    out = []
    if caps.smem_per_block is not None and res["shared"] > caps.smem_per_block:
        out.append(f"{res['shared']} B of shared memory, the arch allows {caps.smem_per_block}")
    per_warp = -(-res["regs"] * 32 // 256) * 256  # registers are allocated per warp in units of 256
    if caps.regs_per_sm is not None and per_warp * res["warps"] > caps.regs_per_sm:
        out.append(f"{res['regs']} registers x {res['warps']} warps exceed the {caps.regs_per_sm}-register file")
    return out


def build_row(kernel, shape, arch, launches, compiled, caps, path="-", error="") -> Row:
    """The row of one (kernel, shape, arch) from its launches and their compile results (by launch key)."""
    names: dict[str, int] = {}
    for la in launches:
        names[la.name] = names.get(la.name, 0) + 1
    launched = " + ".join(n.strip("_").removesuffix("_kernel") + (f" x{c}" if c > 1 else "") for n, c in names.items())
    row = Row(kernel, shape, arch, path, launched or "-", smem_limit=caps.smem_per_block)
    row.spill_free = any(la.name in SPILL_FREE for la in launches)
    if error:
        row.ok = False
        row.errors.append(f"dispatch error: {error}")
    if not launches and not error:
        row.ok = False
        row.errors.append("no Triton launch recorded")
    for la in launches:
        res = compiled[la.key(arch)]
        if not res["ok"]:
            row.ok = False
            row.errors.append(f"{la.name}: compile error: {res['error']}")
            continue
        row.regs = max(row.regs or 0, res["regs"] or 0)
        row.shared = max(row.shared or 0, res["shared"])
        row.spill = max(row.spill, res["spill"])
        for p in fit_problems(res, caps):
            row.fits = False
            row.errors.append(f"{la.name}: {p}")
        if la.name in SPILL_FREE and res["spill"]:
            row.errors.append(f"{la.name}: spills {res['spill']} B per thread on a spill-free path")
    return row


#: Counts of the last :func:`compile_matrix`: launches recorded, distinct compiles.
STATS: dict[str, int] = {}


def compile_matrix(archs=ARCHS, workloads: list[Workload] | None = None, jobs: int | None = None) -> list[Row]:
    """Capture every workload on every arch, compile the distinct launches in a pool, and build the rows."""
    from solkit.kernels.common.capability import caps_for_product

    wl = WORKLOADS if workloads is None else workloads
    only = None if workloads is None else [(w.kernel, w.shape) for w in workloads]
    jobs = jobs or os.cpu_count() or 1
    with ProcessPoolExecutor(max_workers=min(jobs, len(archs)), max_tasks_per_child=1) as pool:
        captured = dict(zip(archs, pool.map(capture_arch, archs, [only] * len(archs))))
    todo: dict[str, tuple[Launch, int]] = {}
    for arch, cap in captured.items():
        for launches in cap["launches"].values():
            for la in launches:
                todo.setdefault(la.key(arch), (la, arch))
    keys = list(todo)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        compiled = dict(zip(keys, pool.map(_compile_star, [todo[k] for k in keys], chunksize=1)))
    rows = []
    for w in wl:
        for arch in archs:
            cap = captured[arch]
            caps = caps_for_product(ARCH_PRODUCT[arch])
            rows.append(
                build_row(
                    w.kernel,
                    w.shape,
                    arch,
                    cap["launches"].get((w.kernel, w.shape), []),
                    compiled,
                    caps,
                    cap["paths"].get(w.kernel, "-"),
                    cap["errors"].get((w.kernel, w.shape), ""),
                )
            )
    STATS.update(launches=sum(len(v) for c in captured.values() for v in c["launches"].values()), compiles=len(keys))
    return rows


def failures(rows: list[Row]) -> list[str]:
    """One line per failure: compile or dispatch error, a kernel that does not fit, spills on a spill-free path."""
    return [f"{r.kernel} [{r.shape}] sm_{r.arch}: {e}" for r in rows for e in r.errors]


# --------------------------------------------------------------------------------------------- the page
def _cell(value) -> str:
    return "-" if value is None else str(value)


def matrix_markdown(rows: list[Row], archs=ARCHS) -> str:
    """The matrix (one line per kernel, shape and arch) and a per-arch summary."""
    lines = ["| kernel | shape | arch | path | launched | registers | spill B | shared B | fits |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if not r.ok:
            status = "error"
        else:
            status = "yes" if r.fits else "no"
        if r.spill_free and r.ok:
            status += " (spill-free)"
        lines.append(f"| {r.kernel} | {r.shape} | sm_{r.arch} | {r.path} | {r.launched} | {_cell(r.regs)} | "
                     f"{r.spill} | {_cell(r.shared)} | {status} |")  # fmt: skip
    summary = ["| arch | rows | failures | rows with spills | of them spill-free paths |", "|---|---|---|---|---|"]
    for a in archs:
        mine = [r for r in rows if r.arch == a]
        summary.append(
            f"| sm_{a} | {len(mine)} | {sum(1 for r in mine if r.errors)} | "
            f"{sum(1 for r in mine if r.spill)} | {sum(1 for r in mine if r.spill and r.spill_free)} |"
        )
    return "\n".join(summary) + "\n\n" + "\n".join(lines) + "\n"


def parse_matrix(text: str) -> dict[tuple[str, str, str], dict[str, str]]:
    """The rows of a page's matrix block, by (kernel, shape, arch), each column by name."""
    out = {}
    header = None
    for line in text.splitlines():
        if not line.startswith("| "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "kernel":
            header = cells
        elif header and len(cells) == len(header):
            row = dict(zip(header, cells))
            out[(row["kernel"], row["shape"], row["arch"])] = row
    return out


#: Columns compared whatever the Triton version; registers and shared memory only for the page's version.
STRICT = ("path", "launched", "spill B", "fits")
VERSIONED = ("registers", "shared B")


def matrix_differences(old: str, new: str, same_triton: bool) -> list[str]:
    a, b = parse_matrix(old), parse_matrix(new)
    out = [f"{' '.join(k)}: not on the page" for k in b if k not in a]
    out += [f"{' '.join(k)}: on the page but no longer checked" for k in a if k not in b]
    cols = STRICT + (VERSIONED if same_triton else ())
    for k in b:
        if k in a:
            out += [f"{' '.join(k)}: {c} {a[k][c]} on the page, {b[k][c]} now" for c in cols if a[k][c] != b[k][c]]
    return out


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


MATRIX_INTRO = """Every public kernel's dispatched path at two shapes, on a fake CUDA device that is the product
standing for each architecture ({products}), compiled by Triton {triton} for that architecture on a CPU machine
(`tools/arch_check.py`: the dispatcher itself runs, under `capability.simulate`, and its Triton launches are
recorded and compiled; an autotuned kernel contributes every config its tuner would try). `path` is the
capability model's choice for the kernel (`solkit.kernels.paths`; `-` where a family declares no paths);
`launched` the Triton kernels the dispatcher launched for that shape (xN: N distinct launch configurations).
Registers per thread and spill bytes (stack + local) from the cubin, shared memory per program from Triton's
metadata, each the largest over the launches; fits = shared memory within the architecture's per-block limit
and registers x threads within its register file. Kernels marked spill-free hold their rows in registers by
design, and a spill there fails the check. `--check` compares path, launched, spills and fits exactly, and
registers and shared memory only under Triton {triton} (they move with the compiler).
{stats}
"""


def blocks(rows: list[Row], stats: dict | None = None) -> dict[str, str]:
    """The generated blocks of the page, by name."""
    import triton

    fails = "\n".join(f"- {f}" for f in failures(rows)) or "none"
    intro = MATRIX_INTRO.format(
        products=", ".join(f"sm_{a}: {p}" for a, p in ARCH_PRODUCT.items()),
        triton=triton.__version__,
        stats=f"\n{stats['launches']} launches recorded, {stats['compiles']} distinct compiles." if stats else "",
    )
    why = "compile or dispatch error, does not fit, spills on a spill-free path"
    matrix = f"{intro}\n{matrix_markdown(rows)}\nFailures ({why}): {fails}\n"
    return {"products": products_markdown(), "whatif": whatif_markdown(), "matrix": matrix}


def _block_re(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- arch_check:begin {name} -->\n)(.*?)(<!-- arch_check:end {name} -->)", re.S)


def read_block(page: str, name: str) -> str | None:
    m = _block_re(name).search(page)
    return m.group(2) if m else None


def write_blocks(page: str, new: dict[str, str]) -> str:
    """``page`` with each generated block replaced (appended as a section when the page lacks it)."""
    for name, body in new.items():
        if _block_re(name).search(page):
            page = _block_re(name).sub(lambda m, b=body: m.group(1) + b + m.group(3), page)
        else:
            page += f"\n<!-- arch_check:begin {name} -->\n{body}<!-- arch_check:end {name} -->\n"
    return page


def page_triton(block: str) -> str | None:
    m = re.search(r"compiled by Triton (\S+) for", block or "")
    return m.group(1) if m else None


def check_page(page: str, new: dict[str, str]) -> list[str]:
    """Why ``page`` does not match the fresh blocks: products and what-if exactly, the matrix by column."""
    import triton

    out = [f"block {n} differs" for n in ("products", "whatif") if read_block(page, n) != new[n]]
    old = read_block(page, "matrix")
    if old is None:
        return out + ["no matrix block"]
    return out + matrix_differences(old, new["matrix"], page_triton(old) == triton.__version__)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", metavar="PATH", help="regenerate the page's generated blocks")
    g.add_argument("--check", metavar="PATH", help="exit 1 on a failure or when the page differs")
    ap.add_argument("--jobs", type=int, default=None, help="compile processes (default: os.cpu_count())")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    rows = compile_matrix(jobs=args.jobs)
    stats = STATS
    print(f"arch_check: {len(rows)} rows, {stats['launches']} launches, {stats['compiles']} distinct compiles "
          f"in {time.monotonic() - t0:.0f} s", file=sys.stderr)  # fmt: skip
    fails = failures(rows)
    for f in fails:
        print("FAIL", f, file=sys.stderr)
    new = blocks(rows, stats)
    if args.write:
        path = Path(args.write)
        path.write_text(write_blocks(path.read_text() if path.exists() else PAGE_HEAD, new))
    elif args.check:
        diffs = check_page(Path(args.check).read_text(), new)
        for d in diffs[:40]:
            print("DIFF", d, file=sys.stderr)
        if diffs:
            print(f"{args.check} is out of date: python3 tools/arch_check.py --write {args.check}", file=sys.stderr)
            return 1
    else:
        print(new["matrix"], end="")
    return 1 if fails else 0


PAGE_HEAD = "# solkit across NVIDIA architectures\n"

if __name__ == "__main__":
    sys.exit(main())
