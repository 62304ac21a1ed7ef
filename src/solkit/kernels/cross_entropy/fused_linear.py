"""Fused linear + cross-entropy: ``loss = CE(hidden @ W^T (+ b), targets)`` without the full logits.

Math. For a chunk of ``C`` tokens at a time (``hidden_c`` [C, H], ``W`` [V, H]):

    logits_c = hidden_c @ W^T (+ b)                       (torch GEMM into one reused [C, V] buffer)
    loss_c, dlogits_c = CE kernel (solkit.kernels.cross_entropy.dispatch), gradient written in place
    dhidden_c  = dlogits_c @ W                            (GEMM)
    dW        += dlogits_c^T @ hidden_c                   (GEMM, accumulated in W's dtype by cuBLAS)
    db        += sum_rows dlogits_c                       (fp32)

``dlogits`` is already divided by the number of non-ignored tokens over *all* chunks (``mean``), so the
backward only multiplies dhidden/dW/db by the incoming scalar gradient (skipped when it is 1).
Options are those of the CE kernel: ignore_index, label smoothing, z-loss, softcap; reductions
``mean`` and ``sum`` (``none`` is refused: per-token upstream gradients are unknown in the forward).

Cost. FLOPs: ``6·T·H·V`` (three GEMMs) + the CE kernel; bytes per chunk are dominated by the GEMMs'
operands (W is read three times per chunk, dW read+written once per chunk) plus ``~3·b·C·V`` for the
logits buffer (GEMM write, CE read+write, two GEMM reads). The op is compute-bound at LLM sizes:
T_SOL = 6·T·H·V / (bf16 tensor peak). Memory: one ``[C, V]`` buffer instead of ``[T, V]`` logits,
their gradient and softmax intermediates (peak ≈ inputs + dW + dhidden + ``b·C·V``).
"""

from __future__ import annotations

import torch

from solkit.errors import SolkitError
from solkit.kernels.cross_entropy.dispatch import launch_cross_entropy_rows

DEFAULT_CHUNK_TOKENS = 4096


def _check(hidden, weight, targets, bias, reduction, chunk_tokens) -> None:
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise SolkitError(
            "fused_linear_ce: hidden must be [T, H] and weight [V, H], "
            f"got {tuple(hidden.shape)} and {tuple(weight.shape)}"
        )
    if hidden.dtype != weight.dtype or hidden.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise SolkitError(
            f"fused_linear_ce: hidden/weight dtypes must match (fp16/bf16/fp32), got {hidden.dtype}/{weight.dtype}"
        )
    if targets.shape != hidden.shape[:1]:
        raise SolkitError(f"fused_linear_ce: targets must be [{hidden.shape[0]}], got {tuple(targets.shape)}")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise SolkitError(f"fused_linear_ce: bias must be [{weight.shape[0]}], got {tuple(bias.shape)}")
    if reduction not in ("mean", "sum"):
        raise SolkitError(f"fused_linear_ce: reduction must be 'mean' or 'sum', got {reduction!r}")
    if chunk_tokens < 1:
        raise SolkitError(f"fused_linear_ce: chunk_tokens must be >= 1, got {chunk_tokens}")


def fused_linear_cross_entropy_forward(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, bias: torch.Tensor | None = None, *,
    ignore_index: int = -100, label_smoothing: float = 0.0, z_loss_scale: float = 0.0,
    softcap: float | None = None, reduction: str = "mean", chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    need_grads: tuple[bool, bool, bool] = (True, True, True), ce_config: dict | None = None,
):  # fmt: skip
    """Returns ``(loss, z_loss, d_hidden, d_weight, d_bias)`` (grads for a unit upstream gradient, or
    None where ``need_grads`` says so)."""
    _check(hidden, weight, targets, bias, reduction, chunk_tokens)
    n_tokens, vocab = hidden.shape[0], weight.shape[0]
    targets = targets.contiguous()
    need_dh, need_dw, need_db = need_grads[0], need_grads[1], need_grads[2] and bias is not None
    any_grad = need_dh or need_dw or need_db
    valid = targets != ignore_index
    n_valid = valid.sum()
    losses = torch.empty(n_tokens, dtype=torch.float32, device=hidden.device)
    lse = torch.empty(n_tokens, dtype=torch.float32, device=hidden.device)
    d_hidden = torch.empty_like(hidden) if need_dh else None
    d_weight = torch.empty_like(weight) if need_dw else None
    d_bias = torch.zeros(vocab, dtype=torch.float32, device=hidden.device) if need_db else None
    chunk = min(chunk_tokens, max(n_tokens, 1))
    logits_buf = torch.empty(chunk, vocab, dtype=hidden.dtype, device=hidden.device)
    weight_t = weight.t()
    for i, start in enumerate(range(0, n_tokens, chunk)):
        end = min(start + chunk, n_tokens)
        h = hidden[start:end]
        logits = logits_buf[: end - start]
        if bias is not None:
            torch.addmm(bias.to(hidden.dtype), h, weight_t, out=logits)
        else:
            torch.mm(h, weight_t, out=logits)
        launch_cross_entropy_rows(
            logits, targets[start:end], losses[start:end], lse[start:end], n_valid,
            grad=logits if any_grad else None, mean=reduction == "mean", ignore_index=ignore_index,
            label_smoothing=label_smoothing, z_loss_scale=z_loss_scale, softcap=softcap, config=ce_config,
        )  # fmt: skip
        if need_dh:
            torch.mm(logits, weight, out=d_hidden[start:end])
        if need_dw:
            if i == 0:
                torch.mm(logits.t(), h, out=d_weight)
            else:
                d_weight.addmm_(logits.t(), h)
        if need_db:
            d_bias += logits.sum(0, dtype=torch.float32)
    z_losses = torch.where(valid, z_loss_scale * lse * lse, 0.0)
    denom = n_valid if reduction == "mean" else 1
    loss, z_loss = losses.sum() / denom, z_losses.sum() / denom
    if d_bias is not None:
        d_bias = d_bias.to(bias.dtype)
    return loss, z_loss, d_hidden, d_weight, d_bias


def fused_linear_ce_flops(tokens: int, hidden: int, vocab: int) -> int:
    """GEMM FLOPs of forward + backward (logits, dhidden, dW): ``6·T·H·V``."""
    return 6 * tokens * hidden * vocab
