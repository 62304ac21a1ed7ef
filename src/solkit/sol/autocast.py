"""Autocast, as the trace sees it: the casts ``torch.autocast`` would insert, made explicit.

Autocast works at the dispatcher's Autocast keys, which meta tensors do not carry, so a reference
run under ``torch.autocast`` would be traced as if autocast were off. The trace's function layer
therefore calls :func:`autocast_args` for each torch function: while autocast is enabled (for
``cuda``, or ``cpu`` on a machine without a GPU) the matrix ops of autocast's lower-precision list get
their floating inputs cast to the autocast dtype, and the softmax, normalisation and loss ops of
its fp32 list get theirs cast to fp32. Each cast is a recorded ``_to_copy``, as under real autocast,
so every op is charged as dispatched. A leaf tensor that requires grad (a parameter) is cast once per
trace, as autocast's weight cache does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_map
from torch.utils.weak import WeakIdKeyDictionary

_LOWER = {
    torch.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm, torch.addbmm, torch.mv, torch.addmv,
    torch.addr, torch.chain_matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__,
    torch.Tensor.mm, torch.Tensor.bmm, torch.Tensor.addmm, torch.Tensor.baddbmm, torch.Tensor.mv,
    F.linear, F.bilinear, F.prelu, F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d,
    F.conv_transpose3d, F.scaled_dot_product_attention, torch.conv1d, torch.conv2d, torch.conv3d,
}  # fmt: skip
_FP32 = {
    F.softmax, F.log_softmax, torch.softmax, torch.log_softmax, torch.Tensor.softmax, torch.Tensor.log_softmax,
    F.layer_norm, F.group_norm, F.cross_entropy, F.nll_loss, F.mse_loss, F.l1_loss, F.smooth_l1_loss,
    F.binary_cross_entropy_with_logits, F.kl_div, F.cosine_similarity, torch.cumsum, torch.cumprod,
}  # fmt: skip
_HALF = (torch.float16, torch.bfloat16)


def autocast_dtype() -> torch.dtype | None:
    """The dtype of the enabled autocast (cuda first, then cpu), or None."""
    for device in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device):
            return torch.get_autocast_dtype(device)
    return None


def autocast_args(func: Any, args: tuple, kwargs: dict, cache: WeakIdKeyDictionary) -> tuple[tuple, dict]:
    """``func``'s arguments with the casts autocast would make (unchanged when autocast is off)."""
    if func not in _LOWER and func not in _FP32:
        return args, kwargs
    target = autocast_dtype()
    if target is None:
        return args, kwargs
    eligible = (torch.float32, *_HALF) if func in _LOWER else _HALF
    if func in _FP32:
        target = torch.float32

    def cast(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.dtype not in eligible or x.dtype == target:
            return x
        if x.is_leaf and x.requires_grad:
            got = cache.get(x)
            if got is None or got.dtype != target:
                got = cache[x] = x.to(target)
            return got
        return x.to(target)

    return tree_map(cast, (args, kwargs))
