"""Model configurations for the training benchmark, loaded from ``configs.yaml`` beside this file."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from solkit.errors import SolkitError, choices_hint

CONFIG_FILE = Path(__file__).with_name("configs.yaml")


class ModelConfig(BaseModel):
    """Shapes of a Llama-style decoder (all sizes in elements)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    seq: int = 128
    batch: int = 1

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        for field in ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "seq", "batch"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be >= 1")
        if self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even (RoPE rotates pairs)")
        return self


@functools.lru_cache(maxsize=1)
def _raw() -> dict[str, Any]:
    with CONFIG_FILE.open() as fh:
        return yaml.safe_load(fh)


def config_names() -> list[str]:
    return list(_raw()["models"])


def fallback_peaks() -> dict[str, float]:
    return {str(k): float(v) for k, v in _raw().get("fallback_bf16_peaks", {}).items()}


def get_config(name: str, **overrides: Any) -> ModelConfig:
    """The named configuration, with fields replaced by ``overrides`` (None values are ignored)."""
    models = _raw()["models"]
    if name not in models:
        raise SolkitError(choices_hint(name, config_names(), f"training config (in {CONFIG_FILE.name})"))
    fields = {"name": name, **models[name], **{k: v for k, v in overrides.items() if v is not None}}
    try:
        return ModelConfig(**fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "config"
        raise SolkitError(f"{CONFIG_FILE.name}: {name}.{loc}: {first['msg']}") from None
