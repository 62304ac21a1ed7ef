"""The record every zoo builder returns: a model, its example inputs and what it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Built:
    """A model ready to run: ``model(*args, **kwargs)``; pass ``labels=labels`` too to get a loss.

    ``labels`` is None where the model has no labelled loss (a user's entry point): the caller then
    reduces the output itself. ``tokens`` is batch x sequence for language models, None otherwise.
    """

    model: torch.nn.Module
    args: tuple
    kwargs: dict
    labels: torch.Tensor | None
    family: str
    config: Any
    tokens: int | None
    description: str

    def call(self, with_labels: bool = True) -> Any:
        """Run the model once on the example inputs (with the labels when it has them)."""
        if with_labels and self.labels is not None:
            return self.model(*self.args, **self.kwargs, labels=self.labels)
        return self.model(*self.args, **self.kwargs)
