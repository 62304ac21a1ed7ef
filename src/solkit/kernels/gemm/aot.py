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
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = kernel or config.get("kernel", "tma_persistent")
    fn = JIT_FNS[kernel]
    if not hasattr(fn, "cache_key"):
        raise SolkitError("compile_for needs compiled Triton (unset TRITON_INTERPRET)")
    sig = {name: "i32" for name in ("M", "N", "K", "M_BUCKET", "stride_xm", "stride_wn", "stride_ym", "stride_rm")}
    sig.update({p: f"*{dtype}" for p in ("x_ptr", "w_ptr", "y_ptr", "bias_ptr", "res_ptr")})
    sig.update(alpha="fp32", beta="fp32")
    tc = to_triton_config(config, kernel)
    consts: dict[str, Any] = dict(tc.kwargs)
    if kernel == "tma_persistent":
        sig["num_programs"] = "i32"
    if kernel == "streamk":
        sig.update(ws_ptr="*fp32", count_ptr="*i32")
    if kernel == "splitk":
        sig.update(part_ptr="*fp32", count_ptr="*i32")
        consts["EVEN_K"] = True
    consts.update(HAS_BIAS=has_bias, HAS_RESIDUAL=has_residual, ACT=ACTIVATIONS[activation])
    if not has_bias:
        consts["bias_ptr"] = None
    if not has_residual:
        consts["res_ptr"] = None
    sig.update({k: "constexpr" for k in consts})
    # What the JIT would know at a launch with aligned tensors and N, K, strides multiples of 16 (M is
    # never specialised): without it, loads are not vectorised and cp.async pipelining is skipped.
    aligned = {"x_ptr", "w_ptr", "y_ptr", "N", "K", "stride_xm", "stride_wn", "stride_ym", "part_ptr", "count_ptr"}
    aligned.add("ws_ptr")
    aligned |= ({"bias_ptr"} if has_bias else set()) | ({"res_ptr", "stride_rm"} if has_residual else set())
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names) if name in aligned}
    src = ASTSource(fn=fn, signature={k: sig[k] for k in fn.arg_names}, constexprs=consts, attrs=attrs)
    options = {"num_warps": tc.num_warps, "num_stages": tc.num_stages}
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
