"""Hugging Face transformers models from a config: random weights, no download, example inputs."""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import yaml

from solkit.errors import SolkitError
from solkit.zoo.built import Built

# family -> (config class, model class) in transformers; causal LMs take input_ids, vision models pixel_values.
_CLASSES: dict[str, tuple[str, str]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    "vit": ("ViTConfig", "ViTForImageClassification"),
    "resnet": ("ResNetConfig", "ResNetForImageClassification"),
}
HF_FAMILIES: tuple[str, ...] = tuple(_CLASSES)
_VISION = ("vit", "resnet")
# config.json model_type values that name a family differently
_MODEL_TYPES = {"gemma3_text": "gemma3"}


@functools.cache
def presets() -> dict[str, dict[str, dict]]:
    """family -> preset name -> {"source": ..., "config": {...}} (data/presets.yaml)."""
    text = resources.files("solkit.zoo").joinpath("data/presets.yaml").read_text()
    return yaml.safe_load(text)


def _transformers():
    try:
        import transformers
    except ImportError:
        raise SolkitError("--hf needs transformers: pip install 'solkit[hf]'") from None
    return transformers


def _read_config(config: str | dict | None) -> dict:
    if config is None:
        return {}
    if isinstance(config, dict):
        return dict(config)
    path = Path(config)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise SolkitError(f"--config {config}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise SolkitError(f"--config {config}: not JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(data, dict):
        raise SolkitError(f"--config {config}: expected a JSON object")
    return data


def family_of_config(config: str | dict) -> str:
    """The family a config.json describes, from its ``model_type``."""
    data = _read_config(config)
    model_type = data.get("model_type")
    family = _MODEL_TYPES.get(model_type, model_type)
    if family not in _CLASSES:
        raise SolkitError(f"--config: model_type {model_type!r} is not a known family; known: {', '.join(HF_FAMILIES)}")
    return family


def _fields(family: str, preset: str, config: str | dict | None, layers: int | None) -> dict:
    table = presets()[family]
    if preset not in table:
        raise SolkitError(f"--preset {preset!r} is not a preset of {family}; known: {', '.join(table)}")
    fields = dict(table[preset]["config"])
    fields.update({k: v for k, v in _read_config(config).items() if k not in ("architectures", "transformers_version")})
    if layers is not None:
        if layers < 1:
            raise SolkitError(f"--layers {layers}: must be at least 1")
        if family == "resnet":
            raise SolkitError("--layers does not apply to resnet (its depth is the preset's depths per stage)")
        fields["num_hidden_layers"] = layers
    return fields


def _inputs(family: str, cfg: Any, image_size: int, seq: int, batch: int, dtype, device) -> tuple[dict, torch.Tensor]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    if family in _VISION:
        pixels = torch.randn(batch, cfg.num_channels, image_size, image_size, generator=gen).to(device, dtype)
        labels = torch.randint(0, cfg.num_labels, (batch,), generator=gen).to(device)
        return {"pixel_values": pixels}, labels
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen).to(device)
    # causal LMs shift the labels internally: the inputs are their own labels
    return {"input_ids": ids}, ids


def build(
    family: str,
    *,
    layers: int | None = None,
    seq: int = 128,
    batch: int = 1,
    dtype=torch.float32,
    device="cpu",
    preset: str = "tiny",
    config: str | dict | None = None,
) -> Built:
    """A transformers model of ``family`` at a preset's shapes (overridden by ``config``), random weights.

    ``config`` is a config.json path or a dict of fields laid over the preset. ``layers`` overrides the
    number of hidden layers. Causal LMs get ``input_ids`` of ``batch x seq`` (their own labels); vision
    models get ``pixel_values`` at the config's ``image_size`` and class labels.
    """
    if family not in _CLASSES:
        raise SolkitError(f"unknown model family {family!r}; known: {', '.join(HF_FAMILIES)}")
    if seq < 1 or batch < 1:
        raise SolkitError(f"--seq {seq} / --batch {batch}: both must be at least 1")
    fields = _fields(family, preset, config, layers)
    image_size = int(fields.pop("image_size", 224))
    if family not in _VISION:
        fields["max_position_embeddings"] = max(int(fields.get("max_position_embeddings", seq)), seq)
    tf = _transformers()
    config_cls, model_cls = (getattr(tf, name) for name in _CLASSES[family])
    try:
        cfg = config_cls(**fields)
    except (TypeError, ValueError) as e:
        raise SolkitError(f"--config: {family} config rejected: {e}") from None
    if family == "vit":
        cfg.image_size = image_size
    # build on the target device in the target dtype: 8B-shape embeddings are GBs in fp32 on the host
    with torch.device(device):
        model = model_cls._from_config(cfg, dtype=dtype)
    model.to(device=device, dtype=dtype)
    kwargs, labels = _inputs(family, cfg, image_size, seq, batch, dtype, device)
    tokens = None if family in _VISION else batch * seq
    shape = f"{batch}x3x{image_size}x{image_size}" if family in _VISION else f"{batch}x{seq}"
    n_layers = getattr(cfg, "num_hidden_layers", None)
    desc = f"{model_cls.__name__} preset {preset}" + (f", {n_layers} layers" if n_layers else "") + f", inputs {shape}"
    return Built(model, (), kwargs, labels, family, cfg, tokens, f"{desc}, {str(dtype).removeprefix('torch.')}")
