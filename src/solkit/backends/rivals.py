"""The other public kernel libraries the bench times against: quack-kernels (CuTe DSL) and FlashInfer.

Both are imported on first use and only when installed. Where one is not, its rows are ``unavailable`` with the
reason and what it takes to install it (:data:`INSTALL`): neither fits the 64 MiB of wheels a lent GPU machine
can be given (flashinfer-python's wheel is 101 MB; quack-kernels needs nvidia-cutlass-dsl-libs, 92 MB), so on such
a machine they are reported, not run.

* quack: ``quack.rmsnorm(x, w, eps)``, ``quack.softmax(x)``, ``quack.cross_entropy(logits, targets)`` (the loss per
  row; the suite takes the mean) and LayerNorm where the installed version exports it. Their backward passes are
  quack's own autograd.
* FlashInfer: ``single_prefill_with_kv_cache`` (causal GQA prefill, one sequence; forward only, FlashInfer has no
  backward) for the suite's attention row. Its paged decode is timed by ``benchmarks/gpu_jobs/rivals_decode.sh``.
"""

from __future__ import annotations

import importlib

import torch

from solkit.errors import SolkitError

#: package -> (the pip name, why a lent machine lacks it)
INSTALL = {
    "quack": ("quack-kernels", "needs nvidia-cutlass-dsl-libs (92 MB wheel), over the 64 MiB a lent GPU is given"),
    "flashinfer": ("flashinfer-python", "its wheel is 101 MB, over the 64 MiB a lent GPU is given"),
}
EPS = 1e-5


def probe(package: str) -> str | None:
    """None when ``package`` imports; else one line: why not, and how to install it."""
    try:
        importlib.import_module(package)
    except Exception as exc:  # noqa: BLE001 - any import failure makes the backend unavailable
        pip, why = INSTALL[package]
        return f"{package} not importable ({type(exc).__name__}); pip install {pip} ({why})"[:300]
    return None


def _quack_fn(name: str, *modules: str):
    """``quack.<name>``, else the first of ``quack.<module>.<name>`` that exists (versions moved LayerNorm)."""
    quack = importlib.import_module("quack")
    if hasattr(quack, name):
        return getattr(quack, name)
    for module in modules:
        try:
            return getattr(importlib.import_module(f"quack.{module}"), name)
        except (ImportError, AttributeError):
            continue
    raise SolkitError(f"quack {getattr(quack, '__version__', '?')}: has no {name}")


def quack_rmsnorm(x, w):
    return _quack_fn("rmsnorm", "rmsnorm")(x, w, eps=EPS)


def quack_layernorm(x, w, b):
    fn = _quack_fn("layernorm", "layernorm", "rmsnorm")
    try:
        return fn(x, w, b, eps=EPS)
    except TypeError:  # versions whose LayerNorm takes no bias
        raise SolkitError("quack: this version's layernorm takes no bias") from None


def quack_softmax(x):
    return _quack_fn("softmax", "softmax")(x)


def quack_cross_entropy(z, t):
    loss = _quack_fn("cross_entropy", "cross_entropy")(z, t)
    return (loss.float().mean() if loss.dim() else loss).float()


def flashinfer_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal GQA prefill for the suite's [batch, heads, seq, head_dim] layout, one sequence at a time (batch is 1
    in the suite): K/V are FlashInfer's HND layout as they stand, Q goes in as an [seq, heads, dim] view."""
    flashinfer = importlib.import_module("flashinfer")
    outs = []
    for b in range(q.shape[0]):
        o = flashinfer.single_prefill_with_kv_cache(q[b].transpose(0, 1), k[b], v[b], causal=True, kv_layout="HND")
        outs.append(o.transpose(0, 1))
    return torch.stack(outs) if len(outs) > 1 else outs[0].unsqueeze(0)
