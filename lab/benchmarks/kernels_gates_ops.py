"""The ops of the gates benchmark (``kernels_gates.py``): SwiGLU, GeGLU, RoPE (both layouts), cross-entropy and
fused linear cross-entropy at Llama-3-8B shapes, each with its input factory, eager / solkit / Liger callables and
byte (or FLOP) counts; the eager RoPE references; a private random generator for the inputs.

Split out of ``kernels_gates.py`` (which re-exports every name here), so the benchmarks that reuse the ops
(``kernels_rope.py``, ``kernels_record.py``) and the runner stay under the size guideline.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from solkit.kernels.cross_entropy import cross_entropy, fused_linear_cross_entropy
from solkit.kernels.cross_entropy.dispatch import cross_entropy_bytes
from solkit.kernels.cross_entropy.fused_linear import fused_linear_ce_flops
from solkit.kernels.gates import geglu, swiglu
from solkit.kernels.gates.glu import gated_bytes
from solkit.kernels.rope import apply_rope
from solkit.kernels.rope.rotary import rope_bytes

try:  # Liger-Kernel is optional: rows record the import error when it is missing.
    from liger_kernel.transformers import functional as liger

    LIGER_ERR = None
except Exception as exc:  # noqa: BLE001
    liger, LIGER_ERR = None, f"liger_kernel not importable: {exc!r}"[:200]


_GENERATORS: dict[str, torch.Generator] = {}


def _gen(dev: str) -> torch.Generator:
    # A private generator: a failed CUDA-graph capture (a backend that syncs, e.g. Liger's CE) can leave
    # the default CUDA generator in capture state, and every later torch.randn on it would then raise.
    if dev not in _GENERATORS:
        _GENERATORS[dev] = torch.Generator(device=dev)
        _GENERATORS[dev].manual_seed(1234)
    return _GENERATORS[dev]


def _randn(shape, dev, dtype):
    return torch.randn(shape, device=dev, dtype=dtype, generator=_gen(dev))


def _randint(high, n, dev):
    return torch.randint(0, high, (n,), device=dev, generator=_gen(dev))


# ----------------------------------------------------------------------------------------------- ops
def hf_rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def eager_rope(q, k, cos, sin):
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return q * c + hf_rotate_half(q) * s, k * c + hf_rotate_half(k) * s


def eager_rope_interleaved(q, k, cos, sin):
    c, s = cos[None, :, None, :], sin[None, :, None, :]

    def rot(x):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)

    return q * c + rot(q) * s, k * c + rot(k) * s


def liger_rope_bshd(q, k, cos, sin):
    # Liger takes [B, H, S, D] and cos [1, S, D]; its kernel works in place on contiguous copies.
    out = liger.liger_rope(q.transpose(1, 2), k.transpose(1, 2), cos[None], sin[None])
    return out[0].transpose(1, 2), out[1].transpose(1, 2)  # some versions also return cos, sin


def make_ops(small: bool):
    """Each op: shape info, input factory, forward callables per backend, bytes, reference."""
    M, N = (64, 1000) if small else (8192, 14336)
    B, S, HQ, HK, D = (1, 64, 4, 2, 64) if small else (1, 8192, 32, 8, 128)
    T, V = (64, 5000) if small else (8192, 128256)
    FT, FH, FV = (256, 128, 5000) if small else (16384, 4096, 128256)

    def gate_inputs(dev, dtype):
        g = _randn((M, N), dev, dtype) * 2
        u = _randn((M, N), dev, dtype)
        return [g, u]

    def rope_inputs(dev, dtype):
        q = _randn((B, S, HQ, D), dev, dtype)
        k = _randn((B, S, HK, D), dev, dtype)
        inv = 1.0 / (500000.0 ** (torch.arange(0, D, 2, device=dev, dtype=torch.float32) / D))
        ang = torch.arange(S, device=dev, dtype=torch.float32)[:, None] * inv[None]
        ang = torch.cat((ang, ang), -1)
        return [q, k, ang.cos().to(dtype), ang.sin().to(dtype)]

    def rope_il_inputs(dev, dtype):
        q, k, cos, sin = rope_inputs(dev, dtype)
        h = D // 2
        # interleaved tables: each frequency repeated on its (even, odd) pair
        cos = torch.stack((cos[:, :h], cos[:, :h]), -1).flatten(-2).contiguous()
        sin = torch.stack((sin[:, :h], sin[:, :h]), -1).flatten(-2).contiguous()
        return [q, k, cos, sin]

    def ce_inputs(dev, dtype):
        x = _randn((T, V), dev, dtype) * 2
        y = _randint(V, T, dev)
        y[:: max(T // 16, 1)] = -100  # a few ignored rows
        return [x, y]

    def flce_inputs(dev, dtype):
        h = _randn((FT, FH), dev, dtype)
        w = _randn((FV, FH), dev, dtype) * (FH**-0.5)
        y = _randint(FV, FT, dev)
        y[:: max(FT // 16, 1)] = -100
        return [h, w, y]

    def ce_eager(x, y):
        return F.cross_entropy(x, y, ignore_index=-100)

    def flce_eager(h, w, y):
        return F.cross_entropy(h @ w.t(), y, ignore_index=-100)

    bf16 = torch.bfloat16
    return {
        "swiglu": dict(
            shape=f"[{M}, {N}]", inputs=gate_inputs, n_grad=2,
            fns={"solkit": swiglu, "eager": lambda g, u: F.silu(g) * u,
                 "liger": (lambda g, u: liger.liger_swiglu(g, u)) if liger else None},
            bytes_fwd=gated_bytes(M, N, bf16), bytes_fwdbwd=gated_bytes(M, N, bf16, backward=True),
        ),
        "geglu": dict(
            shape=f"[{M}, {N}]", inputs=gate_inputs, n_grad=2,
            fns={"solkit": geglu, "eager": lambda g, u: F.gelu(g, approximate="tanh") * u,
                 "liger": (lambda g, u: liger.liger_geglu(g, u)) if liger else None},
            bytes_fwd=gated_bytes(M, N, bf16), bytes_fwdbwd=gated_bytes(M, N, bf16, backward=True),
        ),
        "rope": dict(
            shape=f"q [{B}, {S}, {HQ}, {D}], k [{B}, {S}, {HK}, {D}] bshd half-split", inputs=rope_inputs, n_grad=2,
            fns={"solkit": apply_rope, "eager": eager_rope, "liger": liger_rope_bshd if liger else None},
            bytes_fwd=rope_bytes(B, S, HQ, HK, D, bf16), bytes_fwdbwd=rope_bytes(B, S, HQ, HK, D, bf16, backward=True),
        ),
        "rope_interleaved": dict(
            shape=f"q [{B}, {S}, {HQ}, {D}], k [{B}, {S}, {HK}, {D}] bshd interleaved", inputs=rope_il_inputs,
            n_grad=2,
            fns={"solkit": lambda q, k, c, s: apply_rope(q, k, c, s, interleaved=True),
                 "eager": eager_rope_interleaved},
            bytes_fwd=rope_bytes(B, S, HQ, HK, D, bf16), bytes_fwdbwd=rope_bytes(B, S, HQ, HK, D, bf16, backward=True),
        ),
        "cross_entropy": dict(
            shape=f"[{T}, {V}]", inputs=ce_inputs, n_grad=1,
            fns={"solkit": lambda x, y: cross_entropy(x, y), "eager": ce_eager,
                 "liger": (lambda x, y: liger.liger_cross_entropy(x, y)) if liger else None},
            bytes_fwd=cross_entropy_bytes(T, V, bf16, backward=False),
            bytes_fwdbwd=cross_entropy_bytes(T, V, bf16, backward=True),
        ),
        "fused_linear_ce": dict(
            shape=f"hidden [{FT}, {FH}], W [{FV}, {FH}]", inputs=flce_inputs, n_grad=2, fwdbwd_only=True,
            fns={"solkit": lambda h, w, y: fused_linear_cross_entropy(h, w, y), "eager": flce_eager,
                 "liger": (lambda h, w, y: liger.liger_fused_linear_cross_entropy(h, w, y)) if liger else None},
            flops=fused_linear_ce_flops(FT, FH, FV),
        ),
    }  # fmt: skip
