"""solkit.zoo: transformers families from presets, config overrides, entry points, and bad input."""

from __future__ import annotations

import json
import sys

import pytest
import torch

pytest.importorskip("transformers")

from solkit.errors import SolkitError  # noqa: E402
from solkit.zoo import HF_FAMILIES, Built, build, family_of_config, load_entry, presets  # noqa: E402


@pytest.mark.parametrize("family", HF_FAMILIES)
@pytest.mark.parametrize("batch,seq", [(1, 8), (2, 13)])
def test_every_family_builds_tiny_and_gives_a_loss(family, batch, seq):
    b = build(family, batch=batch, seq=seq)
    assert isinstance(b, Built) and b.family == family
    out = b.call()
    assert out.loss.ndim == 0 and torch.isfinite(out.loss)
    if family in ("vit", "resnet"):
        assert b.tokens is None and b.kwargs["pixel_values"].shape[0] == batch
    else:
        assert b.tokens == batch * seq and b.kwargs["input_ids"].shape == (batch, seq)
        assert b.config.num_hidden_layers == presets()[family]["tiny"]["config"]["num_hidden_layers"]


def test_layers_dtype_and_config_override(tmp_path):
    b = build("llama", layers=3, dtype=torch.float16, config={"hidden_size": 32, "intermediate_size": 48})
    assert b.config.num_hidden_layers == 3 and len(b.model.model.layers) == 3
    assert {p.dtype for p in b.model.parameters()} == {torch.float16}
    assert b.model.model.layers[0].mlp.up_proj.weight.shape == (48, 32)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 32, "num_attention_heads": 2}))
    assert family_of_config(str(path)) == "qwen2"
    q = build("qwen2", config=str(path))
    assert q.config.hidden_size == 32


def test_real_shapes_on_meta():
    b = build("llama", preset="llama3-8b", layers=1, device="meta", dtype=torch.bfloat16, seq=8192)
    n = sum(p.numel() for p in b.model.parameters())
    # 2 x 128256 x 4096 (embedding, untied head) + 4096 x (4096 + 2 x 1024 + 4096) + 3 x 4096 x 14336 + 3 x 4096
    assert n == 2 * 128256 * 4096 + 4096 * (4096 + 2048 + 4096) + 3 * 4096 * 14336 + 3 * 4096
    r = build("resnet", preset="50", device="meta")
    assert sum(p.numel() for p in r.model.parameters()) == 25_557_032  # torchvision/HF ResNet-50: 25.56 M


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: build("gpt17"), "unknown model family 'gpt17'; known: llama"),
        (lambda: build("llama", preset="llama9"), "--preset 'llama9' is not a preset of llama"),
        (lambda: build("llama", layers=0), "--layers 0"),
        (lambda: build("resnet", layers=2), "--layers does not apply to resnet"),
        (lambda: build("llama", config="/nonexistent/config.json"), "--config /nonexistent/config.json"),
        (lambda: family_of_config({"model_type": "bert"}), "model_type 'bert' is not a known family"),
    ],
)
def test_bad_input_is_one_line(call, match):
    with pytest.raises(SolkitError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_missing_transformers_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(SolkitError, match="needs transformers"):
        build("llama")


ENTRY = """
import torch

def make():
    return torch.nn.Linear(8, 4), torch.randn(3, 8)

def make_kwargs():
    return torch.nn.Linear(8, 4), {"input": torch.randn(3, 8)}

def broken():
    raise RuntimeError("no GPU here")

def wrong():
    return 42
"""


def test_entry_points(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(ENTRY)
    monkeypatch.syspath_prepend(str(tmp_path))
    b = load_entry("my_models:make")
    assert b.args[0].shape == (3, 8) and b.kwargs == {} and b.labels is None
    assert b.call().shape == (3, 4)
    assert load_entry("my_models:make_kwargs").call().shape == (3, 4)
    assert load_entry(f"{tmp_path / 'my_models.py'}:make").call().shape == (3, 4)


@pytest.mark.parametrize(
    "spec,match",
    [
        ("no_such_module_xyz:make", "cannot import module 'no_such_module_xyz'"),
        ("my_models:absent", "has no function 'absent'"),
        ("my_models:broken", r"broken\(\) raised RuntimeError: no GPU here"),
        ("my_models:wrong", "must return"),
        ("my_models", "expected module:function"),
        ("/nope/x.py:make", "no file /nope/x.py"),
    ],
)
def test_bad_entry_is_one_line(tmp_path, monkeypatch, spec, match):
    (tmp_path / "my_models.py").write_text(ENTRY)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SolkitError, match=match):
        load_entry(spec)
