"""Training variants: which kernels replace which modules of :mod:`solkit.train.model`, and compile.

A swap replaces one kind of module everywhere in the model by a :class:`Swapped` wrapper that keeps
the original module (so the parameters, their initial values and the optimizer's view of them stay
identical) and calls a fused kernel instead of the module's PyTorch code. Before a swap is applied
its kernel is probed on small random inputs against the original module; a kernel module that is
missing, has another API, or computes something else leaves that swap *unavailable*, with the
reason, and the variant reports it: nothing is silently skipped. After swapping, the number of
replaced modules is asserted against the number the model has.

Kernel modules are imported lazily, inside the swap, so a broken or absent kernel file never stops
the other variants from running.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from solkit.backends import liger
from solkit.errors import SolkitError, choices_hint
from solkit.train.model import LinearResidual, LlamaModel, LlamaRMSNorm, LMHeadLoss, Rotary, SiluMul

# kind -> (model class it replaces, what it fuses)
SWAP_KINDS: dict[str, tuple[type[nn.Module], str]] = {
    "rmsnorm": (LlamaRMSNorm, "RMSNorm forward/backward"),
    "rope": (Rotary, "RoPE on q and k"),
    "swiglu": (SiluMul, "silu(gate) * up"),
    "linear_residual": (LinearResidual, "o_proj / down_proj GEMM with the residual add in the epilogue"),
    "fused_linear_ce": (LMHeadLoss, "LM head GEMM + cross-entropy without materialised logits"),
}


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    backend: str | None = None  # "solkit" or "liger": where the swapped kernels come from
    swaps: tuple[str, ...] = ()
    compile: bool = False


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("eager", "PyTorch eager (SDPA attention, fp32-upcast cross-entropy)"),
        Variant("compile", "torch.compile per decoder layer, final norm and LM head+loss", compile=True),
        Variant("solkit", "eager with solkit's fused kernels swapped in", "solkit", tuple(SWAP_KINDS)),
        Variant("compile+solkit", "solkit kernels swapped in, then torch.compile", "solkit", tuple(SWAP_KINDS), True),
        Variant(
            "flce",
            "eager with only solkit's fused linear cross-entropy (memory attribution)",
            "solkit",
            ("fused_linear_ce",),
        ),  # fmt: skip
        Variant(
            "liger",
            "eager with Liger-Kernel's RMSNorm, RoPE, SwiGLU and fused linear CE",
            "liger",
            ("rmsnorm", "rope", "swiglu", "fused_linear_ce"),
        ),  # fmt: skip
    )
}


def get_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise SolkitError(choices_hint(name, list(VARIANTS), "variant"))
    return VARIANTS[name]


class Swapped(nn.Module):
    """Wraps the original module; ``forward`` calls ``fn(original, *args)`` (a fused kernel)."""

    def __init__(self, kind: str, orig: nn.Module, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.kind = kind
        self.orig = orig
        self._fn = fn
        self.calls = 0  # counted in eager mode only, to assert the kernel actually ran
        # opaque: torch.compile graph-breaks around the kernel instead of tracing into it (needed under
        # Triton's CPU interpreter, which Dynamo cannot trace, and as a fallback when tracing fails).
        self.opaque = False

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.compiler.is_compiling():
            self.calls += 1
        if self.opaque:
            return _run_outside_graph(self._fn, self.orig, *args, **kwargs)
        return self._fn(self.orig, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}"


@torch.compiler.disable
def _run_outside_graph(fn: Callable[..., Any], orig: nn.Module, *args: Any, **kwargs: Any) -> Any:
    return fn(orig, *args, **kwargs)


def set_opaque(model: nn.Module, opaque: bool = True, kinds: tuple[str, ...] | None = None) -> int:
    """Make swapped kernels (of ``kinds``, default all) opaque to torch.compile; returns the count changed."""
    n = 0
    for m in model.modules():
        if isinstance(m, Swapped) and (kinds is None or m.kind in kinds):
            m.opaque = opaque
            n += 1
    return n


def opaque_kinds(model: nn.Module) -> list[str]:
    return sorted({m.kind for m in model.modules() if isinstance(m, Swapped) and m.opaque})


# ---- kernel adapters: each returns fn(orig_module, *forward_args) or raises with a reason ----------


def _kernels():
    # Imported on first use: a broken kernel import leaves only the solkit swaps unavailable.
    import solkit.kernels

    return solkit.kernels


def _solkit_rmsnorm() -> Callable[..., Any]:
    rmsnorm = _kernels().rmsnorm
    return lambda m, x: rmsnorm(x, m.weight, m.eps, 0.0, "llama")


def _solkit_rope() -> Callable[..., Any]:
    apply_rope = _kernels().apply_rope
    return lambda m, q, k, cos, sin: apply_rope(q, k, cos, sin, layout="bshd")


def _solkit_swiglu() -> Callable[..., Any]:
    swiglu = _kernels().swiglu
    return lambda m, gate, up: swiglu(gate, up)


def _solkit_linear_residual() -> Callable[..., Any]:
    fused_linear = _kernels().fused_linear

    def call(m: nn.Module, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        if residual is None:  # nothing to fuse: keep the plain GEMM
            return F.linear(x, m.weight)
        return fused_linear(x, m.weight, None, residual)

    return call


def _solkit_flce() -> Callable[..., Any]:
    fn = _kernels().fused_linear_cross_entropy

    def call(m: nn.Module, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return fn(h.reshape(-1, h.shape[-1]), m.weight, labels.reshape(-1))

    return call


def _liger_ready() -> None:
    importlib.import_module("liger_kernel")  # raises, with the reason, when Liger-Kernel is absent


def _liger_rmsnorm() -> Callable[..., Any]:
    _liger_ready()
    return lambda m, x: liger.rms_norm(x, m.weight, m.eps)


def _liger_rope() -> Callable[..., Any]:
    _liger_ready()
    # Tables as (1, T, D) in q's dtype, as Hugging Face passes them.
    return lambda m, q, k, cos, sin: liger.rope(q, k, cos[None].to(q.dtype), sin[None].to(q.dtype))


def _liger_swiglu() -> Callable[..., Any]:
    _liger_ready()
    return lambda m, gate, up: liger.swiglu(gate, up)


def _liger_flce() -> Callable[..., Any]:
    _liger_ready()
    return lambda m, h, labels: liger.fused_linear_cross_entropy(
        h.reshape(-1, h.shape[-1]), m.weight, labels.reshape(-1)
    )


ADAPTERS: dict[str, dict[str, Callable[[], Callable[..., Any]]]] = {
    "solkit": {
        "rmsnorm": _solkit_rmsnorm,
        "rope": _solkit_rope,
        "swiglu": _solkit_swiglu,
        "linear_residual": _solkit_linear_residual,
        "fused_linear_ce": _solkit_flce,
    },
    "liger": {
        "rmsnorm": _liger_rmsnorm,
        "rope": _liger_rope,
        "swiglu": _liger_swiglu,
        "fused_linear_ce": _liger_flce,
    },
}


# ---- probes: the kernel must compute what the module computes, on the model's real parameters ------


def _probe_args(kind: str, module: nn.Module, model: LlamaModel) -> tuple[Any, ...]:
    cfg = model.cfg
    p = next(model.parameters())
    dev, dt = p.device, p.dtype
    gen = torch.Generator(device=dev).manual_seed(1234)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=torch.float32, generator=gen).to(dt)

    b, t = 2, 16
    if kind == "rmsnorm":
        return (rnd(b, t, cfg.hidden),)
    if kind == "rope":
        cos, sin = model.rope_cos[:t], model.rope_sin[:t]
        return rnd(b, t, cfg.heads, cfg.head_dim), rnd(b, t, cfg.kv_heads, cfg.head_dim), cos, sin
    if kind == "swiglu":
        return rnd(b, t, cfg.intermediate), rnd(b, t, cfg.intermediate)
    if kind == "linear_residual":
        # Training-sized rows: the GEMM autotunes per M bucket, so the probe doubles as its warm-up.
        w = module.weight
        return rnd(cfg.batch, cfg.seq, w.shape[1]), rnd(cfg.batch, cfg.seq, w.shape[0])
    if kind == "fused_linear_ce":
        labels = torch.randint(cfg.vocab, (b, t), device=dev, generator=gen)
        return rnd(b, t, cfg.hidden), labels
    raise AssertionError(kind)


def _rel_err(a: Any, b: Any) -> float:
    if isinstance(a, tuple):
        return max(_rel_err(x, y) for x, y in zip(a, b, strict=True))
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


PROBE_TOLERANCE = {torch.float32: 2e-3, torch.float16: 5e-3, torch.bfloat16: 2e-2}


def _probe(kind: str, fn: Callable[..., Any], module: nn.Module, model: LlamaModel) -> float:
    args = _probe_args(kind, module, model)
    with torch.no_grad():
        want = module(*args) if kind != "linear_residual" else module(args[0], residual=args[1])
        got = fn(module, *args) if kind != "linear_residual" else fn(module, args[0], residual=args[1])
    err = _rel_err(got, want)
    tol = PROBE_TOLERANCE.get(next(model.parameters()).dtype, 2e-2)
    if not err <= tol:  # NaN fails too
        raise ValueError(f"probe mismatch: relative error {err:.3g} > {tol:g} against the PyTorch module")
    return err


@dataclass
class SwapReport:
    kind: str
    status: str  # "ok", "unavailable"
    expected: int
    replaced: int = 0
    probe_rel_err: float | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PreparedVariant:
    variant: Variant
    swaps: list[SwapReport] = field(default_factory=list)
    compiled: list[str] = field(default_factory=list)
    compile_backend: str | None = None
    kernels_opaque_to_compile: bool = False
    opaque_kinds: list[str] = field(default_factory=list)
    compile_retry_reason: str | None = None
    compile_attempts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return all(s.status == "ok" for s in self.swaps)

    @property
    def unavailable(self) -> list[str]:
        return [s.kind for s in self.swaps if s.status != "ok"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant.name,
            "description": self.variant.description,
            "complete": self.complete,
            "unavailable_swaps": self.unavailable,
            "swaps": [s.to_dict() for s in self.swaps],
            "compiled_modules": self.compiled,
            "compile_backend": self.compile_backend,
            "kernels_opaque_to_compile": self.kernels_opaque_to_compile,
            "opaque_kinds": self.opaque_kinds,
            "compile_attempts": self.compile_attempts,
            "compile_retry_reason": self.compile_retry_reason,
        }


@dataclass
class RunSetup:
    """One variant ready to train, as :func:`solkit.train.worker.run` needs it, from either model source.

    ``loss(x, y)`` runs forward + loss; ``model`` owns the parameters (their names are compared across
    variants); ``prepared`` says what the variant did (``to_dict()``, ``variant.compile``, ``swaps``);
    ``first_grads(model)`` returns extra results from the step-0 gradients; ``unavailable`` is the reason
    when nothing of the variant could be applied.
    """

    cfg: Any
    model: nn.Module
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    prepared: Any
    attention: str
    batches: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    unavailable: str | None = None
    first_grads: Callable[[nn.Module], dict[str, Any]] | None = None


def _replace_all(model: nn.Module, target: type[nn.Module], kind: str, fn: Callable[..., Any]) -> int:
    """Replace every ``target`` instance below ``model`` by a Swapped wrapper; returns the count."""
    count = 0
    for parent in list(model.modules()):
        if isinstance(parent, Swapped):
            continue
        for name, child in list(parent.named_children()):
            if isinstance(child, target) and not isinstance(child, Swapped):
                setattr(parent, name, Swapped(kind, child, fn))
                count += 1
    return count


def expected_count(kind: str, model: LlamaModel) -> int:
    target = SWAP_KINDS[kind][0]
    return sum(1 for m in model.modules() if isinstance(m, target) and not isinstance(m, Swapped))


def apply_variant(
    model: LlamaModel, variant: Variant | str, probe: bool = True, compile_backend: str = "inductor"
) -> PreparedVariant:
    """Swap kernels into ``model`` (in place) and compile it, as ``variant`` says."""
    variant = get_variant(variant) if isinstance(variant, str) else variant
    prepared = PreparedVariant(variant)
    for kind in variant.swaps:
        target = SWAP_KINDS[kind][0]
        expected = expected_count(kind, model)
        report = SwapReport(kind, "unavailable", expected)
        prepared.swaps.append(report)
        try:
            fn = ADAPTERS[variant.backend or ""][kind]()
            sample = next(m for m in model.modules() if isinstance(m, target) and not isinstance(m, Swapped))
            if probe:
                report.probe_rel_err = _probe(kind, fn, sample, model)
        except Exception as exc:  # noqa: BLE001 - any failure makes this one swap unavailable, with its reason
            report.reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            continue
        report.replaced = _replace_all(model, target, kind, fn)
        # The count is the assertion that the swap happened everywhere it should.
        assert report.replaced == expected, f"{kind}: replaced {report.replaced} of {expected} modules"
        report.status = "ok"
    if variant.compile:
        if os.environ.get("TRITON_INTERPRET") == "1":
            prepared.kernels_opaque_to_compile = set_opaque(model) > 0
            prepared.opaque_kinds = opaque_kinds(model)
        prepared.compiled = compile_model(model, compile_backend)
        prepared.compile_backend = compile_backend
    return prepared


def compile_model(model: LlamaModel, backend: str = "inductor") -> list[str]:
    """torch.compile each decoder layer (one graph reused by all layers), the final norm and the head."""
    names = []
    for i, layer in enumerate(model.layers):
        layer.compile(backend=backend)
        names.append(f"layers.{i}")
    model.norm.compile(backend=backend)
    model.head.compile(backend=backend)
    return [*names, "norm", "head"]


def swap_call_counts(model: nn.Module) -> dict[str, int]:
    """Calls per swap kind since construction (eager mode only), to assert the kernels ran."""
    counts: dict[str, int] = {}
    for m in model.modules():
        if isinstance(m, Swapped):
            counts[m.kind] = counts.get(m.kind, 0) + m.calls
    return counts
