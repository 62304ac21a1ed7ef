"""PyTorch's SDPA with one backend forced: the ``sdpa_flash``, ``sdpa_cudnn`` and ``sdpa_efficient`` bench backends.

``F.scaled_dot_product_attention`` picks a kernel by priority; forcing each one in turn
(``torch.nn.attention.sdpa_kernel``) shows every kernel PyTorch has, so the best SDPA row is the best there is.
GQA goes through ``enable_gqa=True`` (K/V keep their own head count; no ``repeat_interleave`` in front). A backend
that refuses a call (head dim, dtype, GQA, device) raises :class:`~solkit.errors.SolkitError` naming the backend
and PyTorch's own reasons, which the bench turns into an ``unavailable`` row.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from solkit.errors import SolkitError

#: bench backend name -> the SDPA backend it forces
FORCED = {
    "sdpa_flash": SDPBackend.FLASH_ATTENTION,
    "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
    "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
}

#: How PyTorch says a forced backend refused (CUDA: "No available kernel"; CPU: "No viable backend").
_REFUSED = ("No available kernel", "No viable backend")
_NOISE = ("has been runtime disabled", "not used because")


def _refusal(name: str, backend: SDPBackend, q, k, v, causal: bool, exc: RuntimeError) -> SolkitError:
    """PyTorch says why a forced backend refused only through warnings: run the call again to collect them."""
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel(backend):
        warnings.simplefilter("always")
        with contextlib.suppress(RuntimeError):
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    lines = dict.fromkeys(str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip())
    # PyTorch also warns that the other backends are disabled, and heads each reason with "... not used because:"
    reasons = [line for line in lines if not any(noise in line for noise in _NOISE)]
    detail = "; ".join(reasons or lines) if lines else str(exc).strip().splitlines()[0]
    return SolkitError(f"{name}: SDPA {backend.name} refused this call: {detail}"[:300])


def forced(name: str, causal: bool = True) -> Callable:
    """``attn(q, k, v)`` ([batch, heads, seq, head_dim]; K/V may have fewer heads) through the one SDPA backend
    that ``name`` (a key of :data:`FORCED`) names."""
    backend = FORCED[name]

    def attn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        try:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        except RuntimeError as exc:
            if not any(phrase in str(exc) for phrase in _REFUSED):
                raise
            raise _refusal(name, backend, q, k, v, causal, exc) from None

    attn.__name__ = f"{name}_attention"
    return attn
