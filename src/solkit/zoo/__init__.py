"""solkit.zoo: models built from a config with random weights (Hugging Face ids, config.json, module:function).

``build(family, ...)`` makes a Hugging Face transformers model of one of ``HF_FAMILIES`` from a preset
config (no download, random weights) and example inputs; ``load_entry("pkg.mod:function")`` wraps a
user's own function that returns ``(model, inputs)``. Both give a :class:`Built`. transformers is an
optional dependency and is imported only when a family is built.
"""

from solkit.zoo.built import Built
from solkit.zoo.entry import load_entry
from solkit.zoo.hf import HF_FAMILIES, build, family_of_config, presets

__all__ = ["Built", "HF_FAMILIES", "build", "family_of_config", "load_entry", "presets"]
