"""``solkit.patch(model)``: solkit's kernels in one Hugging Face model instance, each swap probed first.

Nothing global changes: no transformers module, class or function is assigned to. Each swap binds an
instance-level ``forward`` (:mod:`solkit.swap.forwards`) to modules of *this* model, keeping every
module, parameter and hook; ``unpatch`` deletes those attributes again. A swap applies to a group of
alike modules (same class, shapes and attention type) only after :func:`solkit.swap.probe.compare`
has checked it against the group's first module; a failed probe or a kernel that cannot run on the
model's device or dtype leaves that group as it was, and the report says why.
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import nn

from solkit.errors import SolkitError
from solkit.swap import forwards as fw
from solkit.swap import settings
from solkit.swap.families import Family, activation_of, family_of
from solkit.swap.probe import compare, random_like_activation

STATE = "_solkit_patch"
KINDS: dict[str, str] = {
    "rmsnorm": "RMSNorm forward and backward in one kernel each (Gemma: (1 + w) in fp32)",
    "rope": "RoPE on q and k in one launch",
    "attention": "SDPA's fastest backend for this device first (measured order, solkit/swap/configs.yaml)",
    "glu": "the MLP gate: silu(gate) * up (SwiGLU) or gelu_tanh(gate) * up (GeGLU); with down_proj in one op keeping "
    "only gate and up for the backward",
    "linear_residual": "o_proj and down_proj with the residual add in the GEMM epilogue",
    "fused_linear_ce": "LM head + cross-entropy without materialised logits",
}
ALIASES = {"swiglu": "glu", "geglu": "glu", "residual": "linear_residual", "flce": "fused_linear_ce"}
PROBE_BATCH, PROBE_SEQ = 2, 8
# Each probe compares one swap against the model as patched so far. The whole-model probes (the loss,
# the decoder layer) go first, while the layers around the swap still run PyTorch's own code: a
# mismatch then points at that swap alone, and the probes cost least where kernels run interpreted.
PROBE_ORDER = ("fused_linear_ce", "linear_residual", "glu", "rope", "attention", "rmsnorm")


@dataclass
class SwapResult:
    kind: str
    status: str  # "swapped" (all or some modules), "skipped" (none), "n/a" (no such spot in the model), "off"
    count: int = 0
    expected: int = 0
    probe_rel_err: float | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PatchReport:
    """What ``solkit.patch`` swapped (count per kind) and why anything was not."""

    family: str
    model: str
    dtype: str
    device: str
    swaps: list[SwapResult] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return {s.kind: s.count for s in self.swaps}

    @property
    def complete(self) -> bool:
        wanted = [s for s in self.swaps if s.status not in ("off", "n/a")]
        return all(s.status == "swapped" and s.count == s.expected for s in wanted)

    def result(self, kind: str) -> SwapResult:
        return next(s for s in self.swaps if s.kind == kind)

    def to_dict(self) -> dict[str, Any]:
        head = {"family": self.family, "model": self.model, "dtype": self.dtype, "device": self.device}
        return {**head, "complete": self.complete, "counts": self.counts, "swaps": [s.to_dict() for s in self.swaps]}

    def rows(self) -> list[list[Any]]:
        return [[s.kind, s.status, f"{s.count}/{s.expected}", s.probe_rel_err, s.reason or KINDS[s.kind]]
                for s in self.swaps]  # fmt: skip

    def __rich__(self) -> Any:
        from solkit.output import table

        title = f"solkit.patch {self.model} ({self.family}, {self.dtype}, {self.device})"
        return table(title, ["swap", "status", "modules", "probe rel err", "what / why not"], self.rows())

    def __str__(self) -> str:
        return "; ".join(f"{s.kind}: {s.status} {s.count}/{s.expected}" + (f" ({s.reason})" if s.reason else "")
                         for s in self.swaps)  # fmt: skip


@dataclass
class _Bound:
    module: nn.Module
    had_forward: bool
    previous: Any


class _Patcher:
    """One ``patch`` call: the model, its family's classes, and every forward bound so far."""

    def __init__(self, model: nn.Module, family: Family, state: list[_Bound]) -> None:
        self.model, self.family, self.state = model, family, state
        self.classes = family.classes()
        first = next(model.parameters())
        self.dtype, self.device = first.dtype, first.device
        self.hf = family.hf_module()

    # ---- binding --------------------------------------------------------------------------------
    def bound(self, module: nn.Module) -> bool:
        return any(b.module is module for b in self.state)

    def bind(self, module: nn.Module, fn: Callable[..., Any], plan: Any) -> None:
        if not self.bound(module):
            had = "forward" in module.__dict__
            self.state.append(_Bound(module, had, module.__dict__.get("forward")))
            module.forward = types.MethodType(fn, module)
        setattr(module, fw.PLAN, plan)

    def unbind(self, module: nn.Module) -> None:
        for i, b in enumerate(self.state):
            if b.module is module:
                restore(b)
                del self.state[i]
                return

    def modules(self, key: str) -> list[nn.Module]:
        cls = self.classes.get(key)
        return [] if cls is None else [m for m in self.model.modules() if isinstance(m, cls)]

    # ---- probe inputs ---------------------------------------------------------------------------
    def hidden(self, width: int, seed: int = 0) -> torch.Tensor:
        return random_like_activation((PROBE_BATCH, PROBE_SEQ, width), next(self.model.parameters()), seed)

    def position_embeddings(self, attn: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
        base = getattr(self.model, "model", self.model)
        rotary = getattr(base, "rotary_emb", None) or getattr(self.model, "rotary_emb", None)
        if rotary is None:
            raise SolkitError("no rotary_emb on the model to make the probe's cos/sin tables")
        x = self.hidden(self.model.config.hidden_size)
        pos = torch.arange(PROBE_SEQ, device=self.device)[None]
        layer_type = getattr(attn, "layer_type", None)
        if "layer_type" in inspect.signature(rotary.forward).parameters:
            return rotary(x, pos, layer_type)
        return rotary(x, pos)

    def attention_plan(
        self, attn: nn.Module, rope: bool | None = None, sdpa_backends: tuple[Any, ...] | None = None
    ) -> fw.AttentionPlan:
        plan = getattr(attn, fw.PLAN, None) if self.bound(attn) else None
        if plan is None:
            from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

            plan = fw.AttentionPlan(self.family, False, self.hf.apply_rotary_pos_emb,
                                    self.hf.eager_attention_forward, ALL_ATTENTION_FUNCTIONS)  # fmt: skip
        if rope is not None:
            plan = replace(plan, rope=rope)
        return plan if sdpa_backends is None else replace(plan, sdpa_backends=sdpa_backends)

    def mlp_plan(self, mlp: nn.Module) -> fw.MLPPlan:
        return (getattr(mlp, fw.PLAN, None) if self.bound(mlp) else None) or fw.MLPPlan(None)


def restore(b: _Bound) -> None:
    if b.had_forward:
        b.module.forward = b.previous
    else:
        b.module.__dict__.pop("forward", None)
    b.module.__dict__.pop(fw.PLAN, None)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def _groups(modules: list[nn.Module], key: Callable[[nn.Module], Any]) -> dict[Any, list[nn.Module]]:
    out: dict[Any, list[nn.Module]] = {}
    for m in modules:
        out.setdefault(key(m), []).append(m)
    return out


def _apply_groups(
    p: _Patcher, kind: str, groups: dict[Any, list[nn.Module]], try_group: Callable[[list[nn.Module]], float],
    per_module: int = 1,
) -> SwapResult:  # fmt: skip
    """Probe each group through ``try_group`` (which binds on success); tally the result."""
    res = SwapResult(kind, "skipped", expected=per_module * sum(len(g) for g in groups.values()))
    errs, reasons = [], []
    for key, group in groups.items():
        try:
            errs.append(try_group(group))
            res.count += per_module * len(group)
        except Exception as exc:  # noqa: BLE001 - any failure leaves this group unswapped, with its reason
            reasons.append((f"{key}: " if len(groups) > 1 else "") + _reason(exc))
    if res.count:
        res.status = "swapped"
        res.probe_rel_err = max(errs)
    if reasons:
        res.reason = "; ".join(reasons)[:600]
    if not groups:
        res.reason = "no such module in this model"
    return res


Binding = tuple[nn.Module, Callable[..., Any], Any]  # (module, forward function, plan)


@contextlib.contextmanager
def _temporarily(p: _Patcher, bindings: list[Binding]) -> Iterator[None]:
    """Bind ``bindings`` for the duration of one call, then put every module back as it was."""
    saved = [(m, p.bound(m), getattr(m, fw.PLAN, None)) for m, _, _ in bindings]
    for m, fn, plan in bindings:
        p.bind(m, fn, plan)
    try:
        yield
    finally:
        for m, was_bound, plan in reversed(saved):
            if was_bound:
                setattr(m, fw.PLAN, plan)
            else:
                p.unbind(m)


def _probe(
    p: _Patcher, bindings: list[Binding], call: Callable[..., Any], args: list[Any], kwargs: dict[str, Any],
    params: list[nn.Parameter],
) -> float:  # fmt: skip
    """``call`` as the model is now against ``call`` with ``bindings`` applied (outputs and gradients)."""

    def swapped(*a: Any, **k: Any) -> Any:
        with _temporarily(p, bindings):
            return call(*a, **k)

    return compare(call, swapped, args, kwargs, params=params, dtype=p.dtype)


def _swap_rmsnorm(p: _Patcher) -> SwapResult:
    def eps(m: nn.Module) -> float:
        return float(getattr(m, "variance_epsilon", getattr(m, "eps", 1e-6)))

    def plan(m: nn.Module) -> fw.NormPlan:
        return fw.NormPlan(eps(m), p.family.gemma_norm)

    def try_group(group: list[nn.Module]) -> float:
        m = group[0]
        err = _probe(p, [(m, fw.rmsnorm_forward, plan(m))], m, [p.hidden(m.weight.shape[0])], {}, [m.weight])
        for n in group:
            p.bind(n, fw.rmsnorm_forward, plan(n))
        return err

    return _apply_groups(p, "rmsnorm", _groups(p.modules("norm"), lambda m: (tuple(m.weight.shape), eps(m))), try_group)


def _attention_key(attn: nn.Module) -> Any:
    return (getattr(attn, "layer_type", None) or "attention", getattr(attn, "sliding_window", None))


def _attention_trial(p: _Patcher, **plan: Any) -> Callable[[list[nn.Module]], float]:
    """Probe the attention forward with ``plan`` on a group's first module, then bind it on the whole group."""

    def try_group(group: list[nn.Module]) -> float:
        attn = group[0]
        kwargs = {"position_embeddings": p.position_embeddings(attn), "attention_mask": None}
        bindings = [(attn, fw.attention_forward, p.attention_plan(attn, **plan))]
        err = _probe(p, bindings, attn, [p.hidden(p.model.config.hidden_size)], kwargs, list(attn.parameters()))
        for a in group:
            p.bind(a, fw.attention_forward, p.attention_plan(a, **plan))
        return err

    return try_group


def _swap_rope(p: _Patcher) -> SwapResult:
    return _apply_groups(p, "rope", _groups(p.modules("attention"), _attention_key), _attention_trial(p, rope=True))


def _settle_sdpa_priority(device: torch.device) -> None:
    """Run SDPA's backend selector once on ``device``. On a GPU torch fixes its default priority order at
    the first selection (cuDNN first on some parts); a scope that saved and restored the order before that
    would leave the pre-selection order behind for every other model in the process."""
    if device.type == "cuda":
        t = torch.zeros(1, 1, 2, 8, device=device, dtype=torch.float16)
        torch.nn.functional.scaled_dot_product_attention(t, t, t)


def _swap_attention(p: _Patcher) -> SwapResult:
    impl = getattr(p.model.config, "_attn_implementation", None)
    attns = p.modules("attention")
    if impl != "sdpa":
        return SwapResult("attention", "n/a", expected=len(attns), reason=(
            f"the model's attention is {impl!r}; this swap picks among SDPA's backends (attn_implementation "
            "'sdpa')"))  # fmt: skip
    try:
        backends = settings.sdpa_priority()
        _settle_sdpa_priority(p.device)
    except Exception as exc:  # noqa: BLE001 - the swap is skipped with its reason
        return SwapResult("attention", "skipped", expected=len(attns), reason=_reason(exc))
    trial = _attention_trial(p, sdpa_backends=backends)
    return _apply_groups(p, "attention", _groups(attns, _attention_key), trial)


def _swap_glu(p: _Patcher) -> SwapResult:
    def try_group(group: list[nn.Module]) -> float:
        mlp = group[0]
        act = activation_of(mlp)
        if act is None:
            raise SolkitError(f"act_fn {type(mlp.act_fn).__name__}: the gate kernels compute silu and gelu_tanh")
        x = p.hidden(mlp.gate_proj.in_features)
        plan = fw.MLPPlan(act, fused_down=type(mlp.down_proj) is nn.Linear)  # not an adapter or quantised layer
        err = _probe(p, [(mlp, fw.mlp_forward, plan)], mlp, [x], {}, list(mlp.parameters()))
        for m in group:
            p.bind(m, fw.mlp_forward, plan)
        return err

    key = lambda m: (type(m.act_fn).__name__, type(m.down_proj), m.gate_proj.in_features, m.gate_proj.out_features)  # noqa: E731
    return _apply_groups(p, "glu", _groups(p.modules("mlp"), key), try_group)


def _residual_bindings(p: _Patcher, layer: nn.Module) -> list[Binding]:
    # the attention and MLP forwards take the residual; the layer's forward hands it to them
    return [(layer.self_attn, fw.attention_forward, p.attention_plan(layer.self_attn)),
            (layer.mlp, fw.mlp_forward, p.mlp_plan(layer.mlp)), (layer, fw.decoder_layer_forward, None)]  # fmt: skip


def _swap_linear_residual(p: _Patcher) -> SwapResult:
    layers = p.modules("layer")
    if p.family.sandwich:
        return SwapResult("linear_residual", "n/a", expected=2 * len(layers), reason=(
            f"{p.family.name} normalises the attention and MLP outputs before the residual add (sandwich norms): "
            "no GEMM output meets the residual"))  # fmt: skip

    def try_group(group: list[nn.Module]) -> float:
        layer = group[0]
        for lin in (layer.self_attn.o_proj, layer.mlp.down_proj):
            if type(lin) is not nn.Linear:
                raise SolkitError(f"{type(lin).__name__} is not a plain nn.Linear (an adapter or quantised layer?)")
        kwargs = {"attention_mask": None, "position_ids": torch.arange(PROBE_SEQ, device=p.device)[None],
                  "position_embeddings": p.position_embeddings(layer.self_attn)}  # fmt: skip
        x = p.hidden(p.model.config.hidden_size)
        err = _probe(p, _residual_bindings(p, layer), layer, [x], kwargs, list(layer.parameters()))
        for n in group:
            for m, fn, plan in _residual_bindings(p, n):
                p.bind(m, fn, plan)
        return err

    key = lambda n: _attention_key(n.self_attn)  # noqa: E731
    return _apply_groups(p, "linear_residual", _groups(layers, key), try_group, per_module=2)


def _swap_flce(p: _Patcher) -> SwapResult:
    model, res = p.model, SwapResult("fused_linear_ce", "skipped", expected=1)
    cls = p.classes.get("causal_lm")
    if cls is None or not isinstance(model, cls):
        res.status, res.reason = "n/a", f"not a {p.family.prefix}ForCausalLM (the loss lives in that head)"
        return res
    try:
        from transformers.loss.loss_utils import LOSS_MAPPING

        if model.loss_function is not LOSS_MAPPING["ForCausalLM"]:
            raise SolkitError("the model has its own loss_function; only transformers' ForCausalLMLoss is replaced")
        if type(model.lm_head) is not nn.Linear:
            raise SolkitError(f"lm_head is a {type(model.lm_head).__name__}, not a plain nn.Linear")
        plan = fw.CausalLMPlan(p.family.final_softcap and getattr(model.config, "final_logit_softcapping", None)
                               is not None)  # fmt: skip
        gen = torch.Generator(device="cpu").manual_seed(7)
        ids = torch.randint(model.config.vocab_size, (PROBE_BATCH, PROBE_SEQ), generator=gen).to(p.device)
        params = [model.lm_head.weight, *model.model.norm.parameters()]
        res.probe_rel_err = _probe(p, [(model, fw.causal_lm_forward, plan)], lambda: model(input_ids=ids, labels=ids),
                                   [], {}, params)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the swap is skipped with its reason
        res.reason = _reason(exc)
        return res
    p.bind(model, fw.causal_lm_forward, plan)
    res.status, res.count = "swapped", 1
    return res


SWAPS: dict[str, Callable[[_Patcher], SwapResult]] = {
    "rmsnorm": _swap_rmsnorm,
    "rope": _swap_rope,
    "attention": _swap_attention,
    "glu": _swap_glu,
    "linear_residual": _swap_linear_residual,
    "fused_linear_ce": _swap_flce,
}


def _enabled(options: dict[str, bool] | None) -> dict[str, bool]:
    enabled = dict.fromkeys(KINDS, True)
    for key, value in (options or {}).items():
        kind = ALIASES.get(key, key)
        if kind not in KINDS:
            raise SolkitError(f"solkit.patch: unknown option {key!r}; options: {', '.join(KINDS)}")
        if not isinstance(value, bool):
            raise SolkitError(f"solkit.patch: option {key!r} must be True or False, got {value!r}")
        enabled[kind] = value
    return enabled


def patch(model: nn.Module, *, options: dict[str, bool] | None = None) -> PatchReport:
    """Swap solkit's kernels into ``model`` (in place); returns what was swapped and why anything was not.

    ``options`` turns single swaps off (or on): ``{"rmsnorm": False, "fused_linear_ce": False}``; the
    kinds are :data:`KINDS`. A model type not in :data:`solkit.swap.SUPPORTED` raises one SolkitError.
    """
    family = family_of(model)
    enabled = _enabled(options)
    if model.__dict__.get(STATE) is not None:
        raise SolkitError("solkit.patch: this model is already patched; call solkit.unpatch(model) first")
    if next(model.parameters(), None) is None:
        raise SolkitError("solkit.patch: the model has no parameters")
    state: list[_Bound] = []
    model.__dict__[STATE] = state
    p = _Patcher(model, family, state)
    report = PatchReport(family.name, type(model).__name__, str(p.dtype).removeprefix("torch."), str(p.device))
    results = {}
    for kind in PROBE_ORDER:
        results[kind] = SWAPS[kind](p) if enabled[kind] else SwapResult(kind, "off", reason="turned off by options")
    report.swaps = [results[kind] for kind in KINDS]
    return report


def unpatch(model: nn.Module) -> int:
    """Restore every forward ``patch`` bound on ``model``; returns how many modules were restored."""
    state = model.__dict__.pop(STATE, None)
    if state is None:
        raise SolkitError("solkit.unpatch: this model was not patched by solkit.patch")
    for b in reversed(state):
        restore(b)
    return len(state)


def is_patched(model: nn.Module) -> bool:
    return model.__dict__.get(STATE) is not None
