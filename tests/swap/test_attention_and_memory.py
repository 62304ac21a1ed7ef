"""solkit.patch's attention swap (SDPA's backends in the measured order, scoped to each attention call) and what the
patched model keeps for the backward (saved bytes per layer, the fused loss's chunk), on a CPU (fp32, interpreter)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

from torch.nn.attention import SDPBackend  # noqa: E402

from solkit.errors import SolkitError  # noqa: E402
from solkit.swap import forwards as fw  # noqa: E402
from solkit.swap import patch, settings, unpatch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ONLY_ATTENTION = {"rmsnorm": False, "rope": False, "glu": False, "linear_residual": False, "fused_linear_ce": False}


def tiny(layers: int = 1, hidden: int = 32, inter: int = 48, heads: int = 2, kv: int = 1, **extra) -> torch.nn.Module:
    cfg = transformers.LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_attention_heads=heads,
                                   num_key_value_heads=kv, head_dim=16, num_hidden_layers=layers, vocab_size=96,
                                   max_position_embeddings=64, **extra)  # fmt: skip
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


def ids(batch: int = 1, seq: int = 8) -> torch.Tensor:
    return torch.randint(96, (batch, seq), generator=torch.Generator().manual_seed(3))


def test_the_priority_is_data_with_its_source_and_cudnn_first():
    order = settings.sdpa_priority()
    assert order[0] == SDPBackend.CUDNN_ATTENTION and order.index(SDPBackend.FLASH_ATTENTION) == 1
    assert order[-1] == SDPBackend.MATH  # every device and dtype keeps a backend
    source = settings.entry("attention")["source"]
    assert (ROOT / source).is_file() and source.startswith("benchmarks/results/")
    assert (ROOT / settings.entry("fused_linear_ce")["source"]).is_file()


def test_attention_swap_is_probed_scoped_per_instance_and_unpatched():
    before = torch._C._get_sdp_priority_order()
    ref = tiny(layers=2)
    model, other = copy.deepcopy(ref), copy.deepcopy(ref)
    report = patch(model, options=ONLY_ATTENTION)
    att = report.result("attention")
    assert att.status == "swapped" and att.count == att.expected == 2 and att.probe_rel_err < 1e-5
    assert all(getattr(layer.self_attn, fw.PLAN).sdpa_backends == settings.sdpa_priority()
               for layer in model.model.layers)  # fmt: skip
    assert "forward" not in vars(other.model.layers[0].self_attn)  # another instance keeps transformers' code
    x = ids(2)
    want, got = ref(input_ids=x, labels=x).loss, model(input_ids=x, labels=x).loss
    want.backward()
    got.backward()
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    for (name, p), q in zip(ref.named_parameters(), model.parameters(), strict=True):
        assert float((q.grad - p.grad).norm() / p.grad.norm().clamp_min(1e-12)) < 1e-4, name
    assert torch._C._get_sdp_priority_order() == before  # no global backend order left behind
    assert unpatch(model) == 2 and "forward" not in vars(model.model.layers[0].self_attn)


def test_attention_option_off_and_not_sdpa_are_reported():
    model = tiny()
    report = patch(model, options={**ONLY_ATTENTION, "rope": True, "attention": False})
    assert report.result("attention").status == "off"
    assert getattr(model.model.layers[0].self_attn, fw.PLAN).sdpa_backends == ()  # rope bound, torch's own SDPA order
    unpatch(model)
    eager = tiny(attn_implementation="eager")
    res = patch(eager, options=ONLY_ATTENTION).result("attention")
    assert res.status == "n/a" and "'eager'" in res.reason and res.count == 0


def test_a_backend_list_the_device_cannot_serve_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(settings, "sdpa_priority", lambda: (SDPBackend.CUDNN_ATTENTION,))  # no cuDNN on a CPU
    model = tiny()
    res = patch(model, options=ONLY_ATTENTION).result("attention")
    assert res.status == "skipped" and res.count == 0 and "RuntimeError" in res.reason
    assert "forward" not in vars(model.model.layers[0].self_attn)  # never applied


def test_a_layer_with_the_attention_swap_compiles_with_no_graph_break():
    from torch._dynamo.utils import counters

    ref = tiny()
    model = copy.deepcopy(ref)
    patch(model, options={"fused_linear_ce": False})  # every layer swap, the attention scope included
    torch._dynamo.reset()
    counters.clear()
    model.model.layers[0].compile(backend="aot_eager", fullgraph=True)
    x = ids()
    got = model(input_ids=x, labels=x).loss
    got.backward()
    assert dict(counters["graph_break"]) == {}
    assert float(got) == pytest.approx(float(ref(input_ids=x, labels=x).loss), rel=1e-5)


def test_bad_settings_are_one_line_errors(monkeypatch):
    monkeypatch.setattr(settings, "entry", lambda name: {"sdpa_priority": ["cudnn_attention", "warp_drive"]})
    with pytest.raises(SolkitError, match="sdpa_priority: unknown backend 'warp_drive'"):
        settings.sdpa_priority()
    monkeypatch.setattr(settings, "entry", lambda name: {"logits_buffer_mib": "lots"})
    with pytest.raises(SolkitError, match="fused_linear_ce: needs integer"):
        settings.loss_chunk_tokens(128, 2)


@pytest.mark.parametrize(
    ("vocab", "itemsize", "chunk"), [(128256, 2, 4096), (256000, 2, 2048), (151936, 2, 2048), (32000, 4, 4096),
                                     (96, 4, 4096), (10**9, 2, 256)],
)  # fmt: skip
def test_the_fused_loss_chunk_bounds_its_logits_buffer(vocab, itemsize, chunk):
    got = settings.loss_chunk_tokens(vocab, itemsize)
    assert got == chunk and (got & (got - 1)) == 0
    assert got * vocab * itemsize <= settings.entry("fused_linear_ce")["logits_buffer_mib"] << 20 or got == 256


def test_the_loss_swap_passes_the_bounded_chunk(monkeypatch):
    seen = {}
    real = fw.fused_linear_cross_entropy

    def spy(*a, **k):
        seen.update(k)
        return real(*a, **k)

    model = tiny()
    patch(model, options={**ONLY_ATTENTION, "attention": False, "fused_linear_ce": True})
    monkeypatch.setattr(fw, "fused_linear_cross_entropy", spy)
    model(input_ids=ids(), labels=ids())
    assert seen["chunk_tokens"] == settings.loss_chunk_tokens(96, 4) == 4096


def _saved_bytes(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Bytes of the distinct storages autograd keeps for the backward, parameters excluded."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=x, labels=x).loss  # noqa: B018 - the graph is what is measured
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in seen.items() if ptr not in params)


@pytest.mark.parametrize(
    ("hidden", "inter", "heads", "kv", "batch", "seq", "dtype"),
    [(64, 128, 4, 2, 2, 16, torch.float32), (48, 72, 3, 1, 1, 13, torch.float16)],
)  # fmt: skip
def test_a_patched_layer_saves_exactly_the_minimal_set(hidden, inter, heads, kv, batch, seq, dtype):
    """Per layer (two layers minus one), exactly: the two norms' inputs and outputs, q, k, v, the attention output, gate
    and up in the model's dtype, plus each norm's rstd and SDPA's log-sum-exp (fp32, one per row); not the gate's
    output (the gate and down_proj op gets it again in its backward), nothing saved twice, no fp32 copy of a half
    tensor. Liger-Kernel's layer keeps the same set and the gate's output too (its SwiGLU saves gate and up, and
    down_proj, an nn.Linear, saves its input): one ``[tokens, intermediate]`` tensor more."""
    per_layer = {}
    for name, patched in (("hf", False), ("patched", True)):
        sizes = []
        for layers in (1, 2):
            model = tiny(layers=layers, hidden=hidden, inter=inter, heads=heads, kv=kv).to(dtype)
            if patched:
                assert patch(model).complete
            sizes.append(_saved_bytes(model, ids(batch, seq)))
        per_layer[name] = sizes[1] - sizes[0]
    t, b, head_dim = batch * seq, dtype.itemsize, 16  # tokens, bytes per element
    tensors = b * t * (6 * hidden + 2 * kv * head_dim + 2 * inter)  # x, h (x2 norms), q, attn out; k, v; gate, up
    stats = 4 * t * (2 + heads)  # fp32: two norms' rstd, SDPA's log-sum-exp per head
    assert per_layer["patched"] == tensors + stats, per_layer
    liger = tensors + stats + b * t * inter  # the same, and the gate's output
    assert per_layer["patched"] < liger < per_layer["hf"], per_layer  # transformers' own layer keeps more still
