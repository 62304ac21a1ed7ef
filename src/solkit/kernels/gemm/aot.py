"""Ahead-of-time compilation of one GEMM config for a given architecture, without a GPU.

``compile_for(90, cfg)`` runs Triton's compiler for ``sm_90`` on one entry of gemm/configs.yaml and
returns the compiled kernel: its ``metadata.shared`` says whether the config fits in shared memory
and ``asm["ptx"]`` shows the instructions (wgmma on sm_90), before any GPU time is spent. Re-exported
as ``solkit.kernels.gemm.dispatch.compile_for``.
"""

from __future__ import annotations

from typing import Any

import triton

from solkit.errors import SolkitError
from solkit.kernels.gemm.kernels import JIT_FNS
from solkit.kernels.gemm.table import ACTIVATIONS, to_triton_config


def compile_for(
    arch: int,
    config: dict[str, Any],
    *,
    kernel: str | None = None,
    dtype: str = "bf16",
    has_bias: bool = True,
    has_residual: bool = True,
    activation: str = "none",
):
    """Compile one config for ``sm_<arch>`` without a GPU (Triton's AOT path); returns the compiled kernel.

    Its ``metadata.shared`` (bytes of shared memory) tells whether a config fits before any GPU time
    is spent; ``asm["ptx"]`` shows the instructions (wgmma on sm_90). Not available in interpreter mode.
    """
    kernel = kernel or config.get("kernel", "tma_persistent")
    extra_sig: dict[str, str] = {}
    extra_consts: dict[str, Any] = {}
    if kernel == "tma_persistent":
        extra_sig["num_programs"] = "i32"
    if kernel == "splitk":
        extra_sig.update(part_ptr="*fp32", count_ptr="*i32")
        extra_consts["EVEN_K"] = True
    return compile_kernel(arch, JIT_FNS[kernel], to_triton_config(config, kernel), extra_sig=extra_sig,
                          extra_consts=extra_consts, dtype=dtype, has_bias=has_bias, has_residual=has_residual,
                          activation=activation)  # fmt: skip


def compile_kernel(
    arch: int,
    fn,
    tc: triton.Config,
    *,
    extra_sig: dict[str, str] | None = None,
    extra_consts: dict[str, Any] | None = None,
    dtype: str = "bf16",
    has_bias: bool = True,
    has_residual: bool = True,
    activation: str = "none",
):
    """Compile a JIT function with the GEMM launch signature (x, W, y, bias, residual, M, N, K, strides, alpha,
    beta, the epilogue flags) plus ``extra_sig`` (pointer arguments, as ``*fp32``, are taken 16-byte aligned)
    for ``sm_<arch>``, with ``tc``'s parameters and ``extra_consts`` as compile-time constants."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if not hasattr(fn, "cache_key"):
        raise SolkitError("compile_for needs compiled Triton (unset TRITON_INTERPRET)")
    sig = {name: "i32" for name in ("M", "N", "K", "M_BUCKET", "stride_xm", "stride_wn", "stride_ym", "stride_rm")}
    sig.update({p: f"*{dtype}" for p in ("x_ptr", "w_ptr", "y_ptr", "bias_ptr", "res_ptr")})
    sig.update(alpha="fp32", beta="fp32")
    sig.update(extra_sig or {})
    consts: dict[str, Any] = dict(tc.kwargs)
    consts.update(extra_consts or {})
    consts.update(HAS_BIAS=has_bias, HAS_RESIDUAL=has_residual, ACT=ACTIVATIONS[activation])
    if not has_bias:
        consts["bias_ptr"] = None
    if not has_residual:
        consts["res_ptr"] = None
    sig.update({k: "constexpr" for k in consts})
    # What the JIT would know at a launch with aligned tensors and N, K, strides multiples of 16 (M is
    # never specialised): without it, loads are not vectorised and cp.async pipelining is skipped.
    aligned = {"x_ptr", "w_ptr", "y_ptr", "N", "K", "stride_xm", "stride_wn", "stride_ym"}
    aligned |= {name for name, kind in (extra_sig or {}).items() if kind.startswith("*")}
    aligned |= ({"bias_ptr"} if has_bias else set()) | ({"res_ptr", "stride_rm"} if has_residual else set())
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names) if name in aligned}
    src = ASTSource(fn=fn, signature={k: sig[k] for k in fn.arg_names}, constexprs=consts, attrs=attrs)
    options = {"num_warps": tc.num_warps, "num_stages": tc.num_stages}
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
