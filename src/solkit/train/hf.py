"""``train-bench --hf FAMILY``: a Hugging Face transformers model (solkit.zoo, random weights) per variant.

The variants: ``eager`` (transformers as it is), ``compile`` (torch.compile of every decoder layer, the
final norm, the LM head and the loss), ``patch`` (:func:`solkit.patch`), ``compile+patch`` (patched,
then compiled the same way, the fused loss left as the kernel it is), ``liger`` (Liger-Kernel's
``apply_liger_kernel_to_<family>``) and ``compile+liger``. Each runs in its own process of
:mod:`solkit.train.worker` (Liger rebinds transformers' module globals; compile caches are
process-wide), seeded the same, so all start from identical weights and see identical tokens.

Gradients at step 0: before a variant's swaps are applied, the worker runs one eager forward and
backward of the same model on the first batch and keeps every parameter's gradient; after the
variant's own first backward it reports, per parameter tensor, ``max|g - g_eager| / max|g_eager|``
and flags the tensors above :data:`GRAD_FLAG`. The runner's cross-process checks (losses over every
step, per-parameter gradient norms) apply as for the built-in model.

This module is imported by the CLI for its names: torch and transformers load inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3")

# Outliers: a parameter whose step-0 gradient differs from eager's by more than this fraction of the
# largest eager element. bf16 keeps 8 mantissa bits; kernels that round at other points than eager
# move single elements by a few units in the last place of the largest, so 0.1 leaves room for that
# and still catches a wrong or missing term, which moves the gradient by O(1).
GRAD_FLAG = {"bf16": 0.1, "fp16": 0.05, "fp32": 1e-3}


@dataclass(frozen=True)
class HFVariant:
    name: str
    description: str
    backend: str | None = None  # "solkit" (solkit.patch) or "liger" (apply_liger_kernel_to_*)
    compile: bool = False


HF_VARIANTS: dict[str, HFVariant] = {
    v.name: v
    for v in (
        HFVariant("eager", "transformers eager (SDPA attention, fp32-upcast cross-entropy)"),
        HFVariant("compile", "torch.compile of each decoder layer, the final norm, lm_head and the loss", compile=True),
        HFVariant("patch", "solkit.patch(model): solkit's kernels bound into this instance", "solkit"),
        HFVariant("compile+patch", "solkit.patch(model), then compiled as `compile`", "solkit", True),
        HFVariant("liger", "Liger-Kernel apply_liger_kernel_to_<family>(model=model)", "liger"),
        HFVariant("compile+liger", "Liger-Kernel's patch, then compiled as `compile`", "liger", True),
    )
}

# Done-means of the HF comparison: speed-ups (tokens/s ratios, at least) and a peak-memory cut (at least).
GOALS = {
    "patch_vs_eager": 1.20,
    "compile+patch_vs_compile": 1.05,
    "patch_vs_liger": 1.03,
    "compile+patch_vs_compile+liger": 1.0,
}
MEMORY_GOALS = {"patch_vs_liger_cut": 0.0}  # peak allocated memory at most Liger's
PAIRS = (
    ("patch", "eager"), ("compile", "eager"), ("compile+patch", "compile"), ("patch", "liger"),
    ("compile+patch", "compile+liger"), ("liger", "eager"), ("compile+liger", "compile"), ("compile+patch", "eager"),
)  # fmt: skip


def model_config(family: str, preset: str, layers: int | None, seq: int, batch: int) -> Any:
    """The train-bench ModelConfig (shapes for FLOPs and MFU) of a zoo model, built on the meta device."""
    import torch

    from solkit.zoo import build

    with torch.device("meta"):
        built = build(family, preset=preset, layers=layers, seq=seq, batch=batch, device="meta")
    return config_of(built.config, family, preset, seq, batch, built.description)


def config_of(c: Any, family: str, preset: str, seq: int, batch: int, description: str = "") -> Any:
    from solkit.train.config import ModelConfig

    heads = c.num_attention_heads
    theta = getattr(c, "rope_theta", None)
    if theta is None:
        params = getattr(c, "rope_parameters", None) or {}
        theta = params.get("rope_theta", 10000.0) if isinstance(params.get("rope_theta"), (int, float)) else 10000.0
    return ModelConfig(
        name=f"hf-{family}-{preset}-L{c.num_hidden_layers}", description=description, hidden=c.hidden_size,
        layers=c.num_hidden_layers, heads=heads, kv_heads=c.num_key_value_heads,
        head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads, intermediate=c.intermediate_size,
        vocab=c.vocab_size, rope_theta=float(theta), norm_eps=float(c.rms_norm_eps),
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", False)), seq=seq, batch=batch,
    )  # fmt: skip


@dataclass
class PreparedHF:
    """What the worker reports of an HF variant (the fields the built-in model's variants report too)."""

    variant: HFVariant
    family: str
    swaps: list[Any] = field(default_factory=list)  # left empty: the patch report carries the swaps
    patch_report: dict[str, Any] | None = None
    liger_function: str | None = None
    compiled: list[str] = field(default_factory=list)
    compile_backend: str | None = None
    kernels_opaque_to_compile: bool = False

    def to_dict(self) -> dict[str, Any]:
        swaps = []
        for s in (self.patch_report or {}).get("swaps", []):
            ok = s["status"] == "swapped" and s["count"] == s["expected"]
            status = "ok" if ok else (s["status"] if s["status"] in ("off", "n/a") else "unavailable")
            swaps.append({**s, "status": status, "patch_status": s["status"]})
        return {
            "variant": self.variant.name,
            "description": self.variant.description,
            "family": self.family,
            "complete": all(s["status"] in ("ok", "off", "n/a") for s in swaps),
            "unavailable_swaps": [s["kind"] for s in swaps if s["status"] == "unavailable"],
            "swaps": swaps,
            "patch_report": self.patch_report,
            "liger_function": self.liger_function,
            "compiled_modules": self.compiled,
            "compile_backend": self.compile_backend,
        }


def compile_hf(model: Any, backend: str = "inductor") -> list[str]:
    """torch.compile each decoder layer (one graph for all), the final norm, and the LM head with the loss.

    A forward bound on the model instance (solkit's or Liger's fused loss) keeps its loss as it is: a
    fused kernel with nothing around it to compile.
    """
    import torch

    base = model.model
    names = []
    for i, layer in enumerate(base.layers):
        layer.compile(backend=backend)
        names.append(f"model.layers.{i}")
    base.norm.compile(backend=backend)
    names.append("model.norm")
    if "forward" not in vars(model):
        model.lm_head.compile(backend=backend)
        model.loss_function = torch.compile(model.loss_function, backend=backend)
        names += ["lm_head", "loss_function"]
    return names


def eager_grads(model: Any, x: Any) -> tuple[dict[str, Any], float]:
    """Step-0 gradients and loss of the unmodified model (one eager forward + backward); .grad is reset."""
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    for p in model.parameters():
        p.grad = None
    return grads, float(loss)


def grad_check(model: Any, reference: dict[str, Any], dtype: str, eager_loss: float | None = None) -> dict[str, Any]:
    """Per parameter tensor: max|g - g_eager| / max|g_eager|; flagged above :data:`GRAD_FLAG`."""
    errs: dict[str, float] = {}
    for name, p in model.named_parameters():
        want = reference.get(name)
        if want is None and p.grad is None:
            continue
        if want is None or p.grad is None:
            errs[name] = float("inf")
            continue
        scale = want.float().abs().max().clamp_min(1e-30)
        errs[name] = float((p.grad.float() - want.float()).abs().max() / scale)
    flag = GRAD_FLAG.get(dtype, GRAD_FLAG["bf16"])
    flagged = sorted((n for n, e in errs.items() if not e <= flag), key=lambda n: -errs[n] if errs[n] == errs[n] else 0)
    worst = max(errs, key=lambda n: errs[n] if errs[n] == errs[n] else float("inf")) if errs else None
    values = sorted(errs.values())
    return {
        "grad_check_step0": {
            "reference": "eager forward + backward of the same model and batch, in this process, before the swaps",
            "eager_loss": eager_loss,
            "metric": "max|g - g_eager| / max|g_eager| per parameter tensor",
            "flag_above": flag,
            "max_rel_err": errs,
            "worst": worst,
            "worst_value": errs.get(worst) if worst else None,
            "median": values[len(values) // 2] if values else None,
            "flagged": flagged,
            "ok": not flagged,
        }
    }


def prepare(spec: dict[str, Any], device: Any, dtype: Any, seed: int) -> Any:
    """Build the zoo model (seeded), take eager's step-0 gradients, then apply the variant."""
    import torch

    from solkit.train.model import synthetic_batches
    from solkit.train.variants import RunSetup
    from solkit.zoo import build

    hf = spec["hf"]
    family, variant = hf["family"], HF_VARIANTS[spec["variant"]]
    torch.manual_seed(seed)
    built = build(family, preset=hf.get("preset", "tiny"), layers=hf.get("layers"), seq=int(spec["seq"]),
                  batch=int(spec["batch"]), dtype=dtype, device=device)  # fmt: skip
    model = built.model.train()
    cfg = config_of(built.config, family, hf.get("preset", "tiny"), int(spec["seq"]), int(spec["batch"]))
    batches = synthetic_batches(cfg, cfg.batch, cfg.seq, 4, seed, device)
    reference, eager_loss = eager_grads(model, batches[0][0]) if spec.get("grad_check", True) else (None, None)
    prepared = PreparedHF(variant, family)
    unavailable = None
    if variant.backend == "solkit":
        from solkit.swap import patch

        report = patch(model)
        prepared.patch_report = report.to_dict()
        if not any(s.status == "swapped" for s in report.swaps):
            unavailable = f"solkit.patch swapped nothing: {report}"
    elif variant.backend == "liger":
        from solkit.backends import liger

        try:
            prepared.liger_function = liger.apply_to_hf(model, family)
        except (ImportError, LookupError, AttributeError) as exc:
            unavailable = f"{type(exc).__name__}: {exc}"
    if variant.compile and unavailable is None:
        prepared.compiled = compile_hf(model, spec.get("compile_backend", "inductor"))
        prepared.compile_backend = spec.get("compile_backend", "inductor")
    dname = str(spec.get("dtype", "bf16"))

    def first_grads(m: Any) -> dict[str, Any]:
        out = grad_check(m, reference, dname, eager_loss)
        reference.clear()  # eager's gradients must not count in the timed steps' peak memory
        return out

    return RunSetup(
        cfg=cfg, model=model, loss=lambda x, y: model(input_ids=x, labels=x).loss, prepared=prepared,
        batches=batches, attention=f"transformers {model.config._attn_implementation}", unavailable=unavailable,
        first_grads=first_grads if reference is not None else None,
    )  # fmt: skip


def summary_parts(ok: dict[str, dict[str, Any]]) -> tuple[dict[str, float], dict[str, float], dict[str, Any]]:
    """Speed-ups, memory ratios and the Done-means goals of an HF run, from the variants that ran."""

    def tps(name: str) -> float | None:
        return ok[name]["tokens_per_s_per_rank"] if name in ok else None

    def mem(name: str) -> float | None:
        return ok[name].get("memory", {}).get("max_allocated_bytes") if name in ok else None

    speedups = {f"{a}_vs_{b}": tps(a) / tps(b) for a, b in PAIRS if tps(a) and tps(b)}
    memory = {f"{a}_vs_{b}_cut": 1 - mem(a) / mem(b) for a, b in PAIRS if mem(a) and mem(b)}
    goals: dict[str, Any] = {}
    for key, target in GOALS.items():
        value = speedups.get(key)
        goals[key] = {"target": target, "value": value, "met": None if value is None else value >= target,
                      "all_swaps_available": all(ok.get(n, {}).get("variant", {}).get("complete", True)
                                                 for n in key.split("_vs_"))}  # fmt: skip
    for key, target in MEMORY_GOALS.items():
        value = memory.get(key)
        goals[key] = {"target": target, "value": value, "met": None if value is None else value >= target,
                      "all_swaps_available": True}  # fmt: skip
    breaks = ok.get("compile+patch", {}).get("graph_breaks")
    goals["compile+patch_graph_breaks"] = {"target": "0", "value": breaks, "met": None if breaks is None else
                                           breaks == 0, "all_swaps_available": True}  # fmt: skip
    checked = [r.get("grad_check_step0") for r in ok.values()]
    goals["gradients_checked_step0"] = {
        "met": bool(checked) and all(c is not None and c["ok"] for c in checked),
        "flagged": {n: r["grad_check_step0"]["flagged"] for n, r in ok.items() if r.get("grad_check_step0")},
        # the same step's loss, eager (in each variant's own process) against the variant
        "step0_loss_abs_diff": {
            n: abs(r["first_loss"] - r["grad_check_step0"]["eager_loss"])
            for n, r in ok.items()
            if (r.get("grad_check_step0") or {}).get("eager_loss") is not None and r.get("first_loss") is not None
        },
    }
    return speedups, memory, goals
