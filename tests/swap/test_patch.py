"""solkit.patch on tiny Hugging Face models (fp32, Triton interpreter on a CPU): loss parity with the unpatched
model over a few optimizer steps, unpatch restores, nothing global changes, unknown models and failing probes."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

import solkit  # noqa: E402
from solkit.errors import SolkitError  # noqa: E402
from solkit.swap import KINDS, SUPPORTED, patch, unpatch  # noqa: E402
from solkit.swap import forwards as fw  # noqa: E402

# hidden 32, 2 query heads of 16 (a power of two, as the RoPE kernel needs), 1 kv head (GQA), 2 layers
TINY = dict(hidden_size=32, intermediate_size=48, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            num_hidden_layers=2, vocab_size=96, max_position_embeddings=64)  # fmt: skip
CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {"query_pre_attn_scalar": 16, "sliding_window": 4, "final_logit_softcapping": 5.0},
    ),  # fmt: skip
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"query_pre_attn_scalar": 16, "sliding_window": 4}),
}
SANDWICH = {"gemma2", "gemma3"}


def tiny(family: str, layers: int = 2, **extra) -> torch.nn.Module:
    config_cls, model_cls, fields = CLASSES[family]
    cfg = getattr(transformers, config_cls)(**{**TINY, **fields, "num_hidden_layers": layers, **extra})
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(cfg)
    with torch.no_grad():  # Gemma's norm weights start at 0 (scale 1 + w): make every weight matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def ids(batch: int = 1, seq: int = 8, vocab: int = 96) -> torch.Tensor:
    return torch.randint(vocab, (batch, seq), generator=torch.Generator().manual_seed(3))


def train(model: torch.nn.Module, x: torch.Tensor, steps: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, grads0 = [], {}
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        if i == 0:
            grads0 = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        losses.append(float(loss))
    return losses, grads0


@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma2"])
def test_patched_model_trains_like_the_original_and_unpatch_restores(family):
    ref = tiny(family, layers=2 if family in SANDWICH else 1)  # Gemma 2: a sliding and a global layer
    model = copy.deepcopy(ref)
    pristine = copy.deepcopy(ref)
    report = patch(model)
    for s in report.swaps:
        if s.kind == "linear_residual" and family in SANDWICH:
            assert s.status == "n/a" and "sandwich" in s.reason
        elif s.kind == "attention" and model.config._attn_implementation != "sdpa":
            assert s.status == "n/a" and "'sdpa'" in s.reason
        else:
            assert s.status == "swapped" and s.count == s.expected > 0, s
    layers = len(model.model.layers)
    assert report.counts["rmsnorm"] == (4 if family in SANDWICH else 2) * layers + 1
    assert report.counts["glu"] == layers and report.counts["fused_linear_ce"] == 1
    json.dumps(report.to_dict())
    # nothing global: the classes and module-level functions of transformers are untouched
    mod = sys.modules[type(model).__module__]
    assert "forward" not in vars(type(model.model.layers[0].self_attn)) or (
        type(model.model.layers[0].self_attn).forward is vars(type(pristine.model.layers[0].self_attn))["forward"]
    )
    assert mod.apply_rotary_pos_emb.__module__ == mod.__name__
    assert "forward" in vars(model.model.layers[0].self_attn) and "forward" not in vars(ref.model.layers[0].self_attn)

    x = ids()
    want, g_want = train(ref, x, 2)
    got, g_got = train(model, x, 2)
    assert got == pytest.approx(want, rel=2e-5, abs=1e-5)
    assert want[-1] < want[0]  # it trained
    assert set(g_got) == set(g_want)
    for name, g in g_want.items():  # per-parameter gradients at step 0
        assert float((g_got[name] - g).norm() / g.norm().clamp_min(1e-12)) < 1e-3, name

    assert unpatch(model) > 0
    assert not any(fw.PLAN in vars(m) or "forward" in vars(m) for m in model.modules())
    assert not hasattr(model, "_solkit_patch")
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in pristine.named_parameters()]
    pristine.load_state_dict(model.state_dict())
    with torch.no_grad():  # the unpatched model runs transformers' own code again: bit-identical logits
        assert torch.equal(model(input_ids=x).logits, pristine(input_ids=x).logits)


@pytest.mark.parametrize("family", ["mistral", "qwen3", "gemma3"])
def test_other_families_patch_with_loss_and_gradient_parity(family):
    ref = tiny(family, layers=1)
    model = copy.deepcopy(ref)
    report = patch(model)
    assert all(s.status == "swapped" for s in report.swaps if s.kind not in ("linear_residual", "attention")), str(
        report
    )
    attention = report.result("attention")
    assert attention.status == ("swapped" if model.config._attn_implementation == "sdpa" else "n/a"), attention
    if family == "qwen3" or family == "gemma3":  # the per-head q/k norms are swapped too
        assert report.counts["rmsnorm"] == (4 if family in SANDWICH else 2) + 2 + 1
    x = ids()
    want, got = ref(input_ids=x, labels=x).loss, model(input_ids=x, labels=x).loss
    want.backward()
    got.backward()
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    for (name, p), q in zip(ref.named_parameters(), model.parameters(), strict=True):
        assert float((q.grad - p.grad).norm() / p.grad.norm().clamp_min(1e-12)) < 1e-3, name


def test_without_labels_the_logits_are_the_models_own():
    ref = tiny("llama", layers=1)
    model = copy.deepcopy(ref)
    patch(model, options={"rope": False, "glu": False, "linear_residual": False, "rmsnorm": False})
    with torch.no_grad():
        out = model(input_ids=ids())
    assert out.logits is not None and out.logits.shape == (1, 8, 96)
    assert model(input_ids=ids(), labels=ids()).logits is None  # the fused loss builds no logits


def test_options_turn_single_swaps_off_and_bad_options_are_refused():
    model = tiny("llama", layers=1)
    report = patch(model, options={"rmsnorm": False, "rope": False, "swiglu": False, "fused_linear_ce": False})
    assert report.result("rmsnorm").status == "off" and report.result("glu").status == "off"
    assert report.result("linear_residual").count == 2
    assert not any(isinstance(m, transformers.models.llama.modeling_llama.LlamaRMSNorm) and "forward" in vars(m)
                   for m in model.modules())  # fmt: skip
    with pytest.raises(SolkitError, match="already patched"):
        patch(model)
    unpatch(model)
    with pytest.raises(SolkitError, match="not patched"):
        unpatch(model)
    with pytest.raises(SolkitError, match=r"unknown option 'rmsnrom'.*rmsnorm"):
        patch(model, options={"rmsnrom": False})
    with pytest.raises(SolkitError, match="True or False"):
        patch(model, options={"rope": "no"})
    assert set(KINDS) == {"rmsnorm", "rope", "attention", "glu", "linear_residual", "fused_linear_ce"}
    base = model.model  # a LlamaModel: no causal-LM head, so the loss swap has nowhere to go
    report = patch(base, options={"rope": False, "glu": False, "linear_residual": False})
    assert report.result("rmsnorm").count == 3 and report.complete
    flce = report.result("fused_linear_ce")
    assert flce.status == "n/a" and "ForCausalLM" in flce.reason


def test_an_unknown_model_gets_one_message_listing_the_supported_ones():
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32))
    with pytest.raises(SolkitError) as e:
        patch(gpt2)
    msg = str(e.value)
    assert "'gpt2'" in msg and "GPT2LMHeadModel" in msg and all(f in msg for f in SUPPORTED)
    assert "\n" not in msg
    with pytest.raises(SolkitError, match="not supported.*llama"):
        patch(torch.nn.Linear(4, 4))


def test_a_failing_probe_skips_the_swap_and_says_why(monkeypatch):
    only_glu = {"rmsnorm": False, "rope": False, "attention": False, "linear_residual": False, "fused_linear_ce": False}

    def wrong_gate(gate, up, weight, bias, residual, activation):  # sigmoid for silu
        y = torch.nn.functional.linear(torch.sigmoid(gate) * up, weight, bias)
        return y if residual is None else y + residual

    monkeypatch.setattr(fw, "gated_linear", wrong_gate)
    model = tiny("llama", layers=1)
    report = patch(model, options=only_glu)
    glu = report.result("glu")
    assert glu.status == "skipped" and glu.count == 0 and "ProbeMismatch: relative error" in glu.reason
    assert "forward" not in vars(model.model.layers[0].mlp)  # never applied
    unpatch(model)

    def broken(*a, **k):
        raise RuntimeError("no kernel for this device")

    monkeypatch.setattr(fw, "rmsnorm", broken)
    report = patch(model, options={**only_glu, "glu": False, "rmsnorm": True})
    norm = report.result("rmsnorm")
    assert norm.status == "skipped" and norm.reason == "RuntimeError: no kernel for this device"
    assert "skipped 0/3" in str(report)


def test_report_renders_as_a_table():
    from rich.console import Console

    model = tiny("gemma2", layers=1)
    report = patch(model, options={"rope": False, "glu": False, "fused_linear_ce": False})
    console = Console(width=200, record=True)
    console.print(report)
    text = console.export_text()
    assert "solkit.patch Gemma2ForCausalLM" in text and "sandwich" in text and "turned off by options" in text


def test_import_solkit_stays_light_and_exposes_patch():
    code = "import sys, solkit; print('torch' in sys.modules, 'patch' in dir(solkit))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout.split()
    assert out == ["False", "True"]
    assert solkit.patch is patch and solkit.unpatch is unpatch
    with pytest.raises(AttributeError):
        solkit.nope  # noqa: B018


def test_a_patched_decoder_layer_compiles_as_one_graph():
    from torch._dynamo.utils import counters

    ref = tiny("llama", layers=1)
    model = copy.deepcopy(ref)
    patch(model)
    torch._dynamo.reset()
    counters.clear()
    model.model.layers[0].compile(backend="aot_eager", fullgraph=True)  # fullgraph: a graph break raises
    x = ids()
    got = model(input_ids=x, labels=x).loss
    got.backward()
    assert dict(counters["graph_break"]) == {}
    assert float(got) == pytest.approx(float(ref(input_ids=x, labels=x).loss), rel=1e-5)
    assert model.model.layers[0].mlp.down_proj.weight.grad is not None
