"""The GEMM launcher: ``y = act(x @ W.T + bias) * alpha + residual * beta`` in one kernel, picked per call.

Shapes: x [M, K], W [N, K] (nn.Linear layout), bias [N], residual [M, N], y [M, N]; fp32 accumulation.
Bytes moved (the SOL count): (M*K + N*K + M*N) * itemsize, plus M*N * itemsize for the residual and
N * itemsize for the bias. FLOPs: 2*M*N*K on the tensor cores (the epilogue's M*N work is noise).

Fusing the residual into the epilogue saves the unfused version's extra write and two reads of the
[M, N] product: the o_proj + residual case study (docs/kernels/gemm.md).

The paths, one epilogue (epilogue.py); which one a call takes is planning.plan's decision (the capability model,
then the shape rules):

* ``gluon_ws`` (gluon.py; sm_90 with Gluon, M >= GLUON_MIN_M, aligned bf16/fp16): the warp-specialised kernel;
* ``tma_persistent`` (kernels.py; prefill on parts with TMA where its tiles fit): the persistent TMA kernel;
* ``splitk`` (decode.py; decode-sized M <= 64 on parts with TMA): the weight stream, with a GEMV for M = 1 and K
  split across programs with an in-kernel last-program reduction;
* ``pointer`` (kernels.py; every part and the CPU interpreter, odd strides or fp32 at M > 64): masked loads;

The epilogue (bias, activation, alpha, residual, beta) is chosen at compile time (tl.constexpr), so
the variant without it is a plain GEMM. Configs live in gemm/configs.yaml (table.py), per architecture family
and per M regime, and are picked by ``solkit.tune.autotune`` (``SOLKIT_GEMM_TUNER=triton``: by
``triton.autotune``) keyed on M rounded up to a power of two.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

import torch
import triton

from solkit.errors import SolkitError, choices_hint
from solkit.kernels.common.capability import device_caps, unmet
from solkit.kernels.common.device import cuda_sm_count, interpreting, use_descriptor_scratch
from solkit.kernels.gemm import decode, gluon
from solkit.kernels.gemm.aot import compile_for
from solkit.kernels.gemm.gluon import GEMM_BACKENDS, GLUON_MIN_M
from solkit.kernels.gemm.kernels import KERNEL_FNS
from solkit.kernels.gemm.planning import PATHS, allowed_paths, fit_configs, plan
from solkit.kernels.gemm.table import (
    ACTIVATIONS,
    FAMILIES,
    KERNELS,
    M_RANGES,
    SPLITK_DEFAULTS,
    TMA_DEFAULTS,
    TMA_KERNELS,
    load_config_table,
    m_bucket,
    m_range,
    prune_by_block_m,
    prune_by_m_range,
    range_key,
    to_triton_config,
)

#: Names other modules and tools read from here (the table, the AOT compiler, the Gluon backend switch).
__all__ = [
    "ACTIVATIONS", "FAMILIES", "GEMM_BACKENDS", "GEMM_TUNERS", "GLUON_MIN_M", "INTERPRETER_PROGRAMS", "KERNELS",
    "LAST_LAUNCH", "SPLITK_DEFAULTS", "TMA_DEFAULTS", "TMA_KERNELS", "arch_family", "check_operands", "compile_for",
    "gemm", "load_config_table", "m_bucket", "m_range", "native", "operands", "prune_by_block_m", "prune_by_m_range",
    "reference", "select", "tma_ok", "to_triton_config", "torch_epilogue", "tuner_kind",
]  # fmt: skip

#: Programs of the persistent kernels in Triton's interpreter (a few, so each walks several tiles)
INTERPRETER_PROGRAMS = 3
#: What the last launch ran: path, family, regime and config (for benchmarks and reports).
LAST_LAUNCH: dict[str, Any] = {}
TUNING_KEY = ["M_BUCKET", "N", "K", "HAS_BIAS", "HAS_RESIDUAL", "ACT"]


# --------------------------------------------------------------------------------------------- autotune
_AUTOTUNE_ACCEPTS_CACHE = "cache_results" in inspect.signature(triton.autotune).parameters


#: Who picks a config among a regime's autotune list: solkit.tune.autotune, or triton.autotune (the way back).
GEMM_TUNERS = ("solkit", "triton")


def tuner_kind() -> str:
    """``SOLKIT_GEMM_TUNER`` (solkit by default, or triton)."""
    kind = os.environ.get("SOLKIT_GEMM_TUNER", "").strip().lower() or "solkit"
    if kind not in GEMM_TUNERS:
        raise SolkitError(choices_hint(kind, GEMM_TUNERS, "SOLKIT_GEMM_TUNER"))
    return kind


def _tuning_reference(x, w, y, bias, res, *scratch, alpha, beta, ACT, **_):
    """What the correctness gate of solkit.tune compares y with: the op in fp32 torch."""
    activation = next(name for name, code in ACTIVATIONS.items() if code == ACT)
    return reference(x, w, bias, res, alpha=alpha, beta=beta, activation=activation)


@functools.cache
def _autotuner(family: str, regime: str, do_bench=None, fit: tuple[int, int] | None = None):
    """The config selector over the family's autotune list for the regime, keyed on TUNING_KEY (M as
    its bucket) and pruned by M (BLOCK_M for decode, m_min / m_max for prefill). ``fit`` (shared memory per
    program, itemsize): the list fitted to a device it was not measured on (planning.fit_configs).

    solkit.tune.autotune by default: a correctness gate against fp32 torch (y only: splitk's scratch
    differs between configs), parallel compilation, the harness timing protocol and the persistent
    TuneCache (a later process reads the winner back without timing). ``SOLKIT_GEMM_TUNER=triton``
    (read when a (family, regime) selector is first built) selects triton.autotune, with Triton's
    disk cache of timings and ``do_bench`` as its timer. A list pruned to one config (the
    interpreter's) launches it untimed either way.
    """
    entry = load_config_table()[family][regime]
    prune = {"early_config_prune": prune_by_block_m if regime == "decode" else prune_by_m_range}
    configs = []
    listed = entry["autotune"] if fit is None else fit_configs(entry["autotune"], entry["kernel"], fit[1], fit[0])
    for cfg in listed:
        tc = to_triton_config(cfg, entry["kernel"])
        M_RANGES[range_key(tc)] = m_range(cfg)
        configs.append(tc)
    kernel = KERNEL_FNS[entry["kernel"]]
    if tuner_kind() == "triton":
        extra = {"cache_results": True} if _AUTOTUNE_ACCEPTS_CACHE and not interpreting() else {}
        if do_bench is not None:
            extra["do_bench"] = do_bench
        return triton.autotune(configs=configs, key=TUNING_KEY, prune_configs_by=prune, **extra)(kernel)
    from solkit.tune.decorator import autotune

    # M_BUCKET is bucketed already, and N and K stay exact (a model has few of them): bucket="exact"
    return autotune(configs=configs, key=TUNING_KEY, prune_configs_by=prune, bucket="exact",
                    reference=_tuning_reference, outputs=["y_ptr"])(kernel)  # fmt: skip


# --------------------------------------------------------------------------------------------- dispatch
def arch_family(device: torch.device) -> str:
    """The family table an aligned bf16 prefill call takes its configs from on ``device`` (planning.plan):
    hopper where the TMA kernels run, ampere where only the pointer kernel does, interpreter on the CPU."""
    return plan(8192, 4096, 4096, torch.bfloat16, device_caps(device)).family


def tma_ok(*tensors: torch.Tensor) -> bool:
    """TMA needs unit inner stride, 16-byte-aligned base addresses and 16-byte row pitches."""
    for t in tensors:
        es = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16 or (t.stride(0) * es) % 16:
            return False
    return True


def select(rows: int, device: torch.device, aligned: bool) -> tuple[str, str, str]:
    """(family, regime, kernel) of the Triton kernel ``gemm`` takes for ``rows`` = M on a device (planning.plan
    with backend "triton"; ``aligned`` False also stands for fp32, which the TMA kernels never take)."""
    p = plan(rows, 4096, 4096, torch.bfloat16, device_caps(device), aligned=aligned, backend="triton")
    return p.family, p.regime, p.kernel


# --------------------------------------------------------------------------------------------- launcher
def check_operands(x, weight, bias, residual, activation) -> None:
    """SolkitError unless the operands of :func:`gemm` agree in shape, dtype and device."""
    if activation not in ACTIVATIONS:
        raise SolkitError(choices_hint(activation, list(ACTIVATIONS), "activation"))
    if weight.dim() != 2 or x.shape[-1] != weight.shape[1]:
        raise SolkitError(
            f"gemm: x [..., K] and weight [N, K] disagree: x {tuple(x.shape)}, weight {tuple(weight.shape)}"
        )
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32) or weight.dtype != x.dtype:
        raise SolkitError(f"gemm: x and weight must share one dtype of bf16, fp16, fp32; got {x.dtype}, {weight.dtype}")
    if x.device != weight.device:
        raise SolkitError(f"gemm: x on {x.device}, weight on {weight.device}")
    if bias is not None and (bias.shape != (weight.shape[0],) or bias.device != x.device):
        raise SolkitError(f"gemm: bias must be [N]={weight.shape[0]} on {x.device}; got {tuple(bias.shape)}")
    if residual is not None:
        expect = (*x.shape[:-1], weight.shape[0])
        if tuple(residual.shape) != expect or residual.dtype != x.dtype or residual.device != x.device:
            raise SolkitError(
                f"gemm: residual must be {expect} {x.dtype} on {x.device}; got {tuple(residual.shape)} {residual.dtype}"
            )
    if x.device.type != "cuda" and not interpreting():
        raise SolkitError("gemm: tensors on the CPU need TRITON_INTERPRET=1 (Triton's interpreter)")


def operands(x, weight, residual, out):
    """x and the residual as unit-stride 2-D views (copies where needed), W with unit inner stride, and y."""
    lead, K, N = x.shape[:-1], x.shape[-1], weight.shape[0]
    x2 = x.reshape(-1, K)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    M = x2.shape[0]
    r2 = None
    if residual is not None:
        r2 = residual.reshape(M, N)
        if r2.stride(-1) != 1:
            r2 = r2.contiguous()
    if out is not None and (not out.is_contiguous() or out.shape != (*lead, N) or out.dtype != x.dtype):
        raise SolkitError(f"gemm: out must be a contiguous {(*lead, N)} {x.dtype} tensor")
    y = out.reshape(M, N) if out is not None else torch.empty((M, N), dtype=x.dtype, device=x.device)
    return x2, w, r2, y


def gemm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    activation: str = "none",
    config: dict[str, Any] | None = None,
    out: torch.Tensor | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """``act(x @ weight.T + bias) * alpha + residual * beta`` in one Triton kernel.

    x is [..., K], weight [N, K], bias [N], residual [..., N] (same dtype as x); returns [..., N] in
    x's dtype. ``config`` (a gemm/configs.yaml entry, optionally with ``kernel``) bypasses autotuning.
    ``backend`` (default ``SOLKIT_GEMM_BACKEND``, else "auto"): "auto" runs the warp-specialised Gluon kernel
    (gluon.py; faster than ``tma_persistent`` at every prefill shape measured on the H200, docs/kernels/
    gemm-hopper-ws.md) for M >= GLUON_MIN_M on Hopper where it applies, "gluon" for every M > decode_max_m,
    "triton" never; the Triton kernels run everywhere else. ``config={"kernel": "gluon_ws", ...}`` (a
    ``LAST_LAUNCH`` config of that kernel) runs the Gluon kernel with those GluonConfig fields.
    """
    check_operands(x, weight, bias, residual, activation)
    lead, N = x.shape[:-1], weight.shape[0]
    x2, w, r2, y = operands(x, weight, residual, out)
    M, K = x2.shape
    if M == 0 or N == 0:
        return y.reshape(*lead, N)
    if K == 0:  # no products: the epilogue on a zero accumulator, in torch
        z = torch.zeros((M, N), dtype=torch.float32, device=x.device)
        return y.copy_(torch_epilogue(z, bias, r2, alpha, beta, activation)).reshape(*lead, N)

    # The Gluon kernel takes the call first where it applies (prefill on Hopper, or a forced gluon_ws config).
    launch = dict(backend=backend, config=config, activation=activation, alpha=alpha, beta=beta)
    min_prefill_m = int(load_config_table()["decode_max_m"]) + 1
    allowed = "gluon_ws" in allowed_paths(device_caps(x2))[0]
    ran = gluon.try_gemm(x2, w, bias, r2, y, min_prefill_m=min_prefill_m, allowed=allowed, **launch)
    if ran is not None:
        LAST_LAUNCH.clear()
        LAST_LAUNCH.update(family="hopper", regime="prefill", kernel="gluon_ws", m_bucket=m_bucket(M), config=ran)
        return y.reshape(*lead, N)
    _launch_triton(x2, w, bias, r2, y, config=config, alpha=alpha, beta=beta, activation=activation)
    return y.reshape(*lead, N)


def _grid(kernel: str, M: int, N: int, n_prog: int):
    """The launch grid of ``kernel`` as a function of the config's meta-parameters."""
    if kernel == "tma_persistent":
        return lambda meta: (min(n_prog, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)
    if kernel == "splitk":
        return lambda meta: decode.grid(M, N, meta)
    return lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)


def _launch_triton(x2, w, bias, r2, y, *, config, alpha, beta, activation) -> None:
    """Select the Triton kernel for the operands (or the one ``config`` names), launch it and record it."""
    M, K = x2.shape
    N = w.shape[0]
    tensors = [t for t in (x2, w, y, r2) if t is not None]
    caps = device_caps(x2)
    p = plan(M, N, K, x2.dtype, caps, aligned=tma_ok(*tensors), backend="triton")
    family, regime, kernel = p.family, p.regime, p.kernel
    if config is not None:
        kernel = config.get("kernel", load_config_table()[family][regime]["kernel"])
        if kernel not in KERNELS:
            raise SolkitError(choices_hint(kernel, list(KERNELS), "gemm config kernel"))
        if kernel in TMA_KERNELS and not tma_ok(*tensors):
            raise SolkitError(f"gemm: config asks for {kernel} but the tensors are not TMA-aligned")
        needs = dict(PATHS["gemm"])[kernel]
        if not caps.is_interpreter and unmet(needs, caps):  # the interpreter emulates every Triton kernel
            raise SolkitError(f"gemm: config asks for {kernel}, which {caps.name} cannot run: "
                              + ", ".join(unmet(needs, caps)))  # fmt: skip
    args = dict(
        M=M, N=N, K=K, M_BUCKET=m_bucket(M), stride_xm=x2.stride(0), stride_wn=w.stride(0), stride_ym=y.stride(0),
        stride_rm=r2.stride(0) if r2 is not None else 0, alpha=float(alpha), beta=float(beta),
        HAS_BIAS=bias is not None, HAS_RESIDUAL=r2 is not None, ACT=ACTIVATIONS[activation],
    )  # fmt: skip
    n_prog = 0
    if kernel in TMA_KERNELS:
        use_descriptor_scratch()
        # the interpreter: a few programs, so each walks several tiles as on a GPU
        n_prog = cuda_sm_count(x2.device) if x2.device.type == "cuda" else INTERPRETER_PROGRAMS
        if kernel == "tma_persistent":
            args["num_programs"] = n_prog
    ptrs: tuple = (x2, w, y, bias, r2)
    cfgs = [config] if config is not None else p.configs
    if kernel == "splitk":
        ptrs += decode.workspace(x2.device, M, N, cfgs)
    grid = _grid(kernel, M, N, n_prog)
    if config is not None:
        tc = to_triton_config(config, kernel)
        KERNEL_FNS[kernel][grid](*ptrs, **args, **tc.kwargs, num_warps=tc.num_warps, num_stages=tc.num_stages)
        chosen = dict(config)
    else:
        tuner = _autotuner(family, regime) if p.fit is None else _autotuner(family, regime, fit=p.fit)
        tuner[grid](*ptrs, **args)
        best = tuner.best_config
        chosen = {**best.kwargs, "num_warps": best.num_warps, "num_stages": best.num_stages}
    LAST_LAUNCH.clear()
    LAST_LAUNCH.update(family=family, regime=regime, kernel=kernel, m_bucket=args["M_BUCKET"], config=chosen)
    if p.fit is not None and config is None:
        LAST_LAUNCH["derived"] = f"{family} list fitted to {p.fit[0]} B of shared memory per program"


def torch_epilogue(z, bias, residual, alpha, beta, activation) -> torch.Tensor:
    """The epilogue in torch (fp32), for K == 0 and as the reference in tests."""
    if bias is not None:
        z = z + bias.float()
    if activation == "silu":
        z = torch.nn.functional.silu(z)
    elif activation == "gelu_tanh":
        z = torch.nn.functional.gelu(z, approximate="tanh")
    z = z * alpha
    if residual is not None:
        z = z + residual.float() * beta
    return z


def native(x, weight, bias=None, residual=None, *, alpha=1.0, beta=1.0, activation="none") -> torch.Tensor:
    """The same function as torch runs it in x's dtype (cuBLAS, then elementwise ops): its error against
    :func:`reference` is the baseline of the error budget (2x it + atol)."""
    z = torch.nn.functional.linear(x, weight, bias)
    if activation == "silu":
        z = torch.nn.functional.silu(z)
    elif activation == "gelu_tanh":
        z = torch.nn.functional.gelu(z, approximate="tanh")
    z = z * alpha
    return z + residual * beta if residual is not None else z


def reference(x, weight, bias=None, residual=None, *, alpha=1.0, beta=1.0, activation="none") -> torch.Tensor:
    """The same function in fp32 torch (inputs upcast), for checks."""
    z = x.float().reshape(-1, x.shape[-1]) @ weight.float().T
    z = torch_epilogue(z, bias, None if residual is None else residual.reshape(z.shape), alpha, beta, activation)
    return z.reshape(*x.shape[:-1], weight.shape[0])
