"""Module scopes in the profile (forward hooks around each module) and the category of an op.

Each module's forward runs inside a profiler range named ``solkit.module::<qualified name>::<type>``,
so every forward op has its module chain as ancestors in the profiler's event tree. A backward op
has none: it inherits the scopes of the forward op whose autograd node it runs (the profiler gives
both the same sequence number). Categories (attention, mlp, norms, ...) come from data/categories.yaml.
"""

from __future__ import annotations

import functools
import re
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch
import yaml

PREFIX = "solkit.module::"


@functools.cache
def categories() -> dict[str, Any]:
    return yaml.safe_load(resources.files("solkit.model").joinpath("data/categories.yaml").read_text())


@dataclass(frozen=True)
class Scope:
    """One module on an op's chain: its qualified name and class name."""

    qualname: str
    type: str

    @classmethod
    def parse(cls, event_name: str) -> Scope | None:
        if not event_name.startswith(PREFIX):
            return None
        qual, _, typ = event_name[len(PREFIX) :].rpartition("::")
        return cls(qual, typ)


@contextmanager
def module_scopes(model: torch.nn.Module):
    """Open a profiler range around each module's forward while the context is active."""
    handles = []
    stacks: dict[int, list] = {}

    def pre(name, typ):
        def hook(mod, args):
            rf = torch.profiler.record_function(f"{PREFIX}{name}::{typ}")
            rf.__enter__()
            stacks.setdefault(id(mod), []).append(rf)

        return hook

    def post(mod, args, out):
        stack = stacks.get(id(mod))
        if stack:
            stack.pop().__exit__(None, None, None)

    for name, mod in model.named_modules():
        handles.append(mod.register_forward_pre_hook(pre(name or "<model>", type(mod).__name__)))
        handles.append(mod.register_forward_hook(post, always_call=True))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def param_scopes(qualname: str, types: dict[str, str]) -> list[Scope]:
    """The module chain of ``qualname`` (innermost first), from the model's own module names and types."""
    parts = qualname.split(".")
    chain = [Scope(q, types.get(q, "")) for q in (".".join(parts[:i]) for i in range(len(parts), 0, -1))]
    return chain + [Scope("<model>", types.get("", ""))]


def category(op: str, scopes: list[Scope], in_optimizer: bool) -> str:
    """The module-type category of an op: optimizer scope, then op-name rules, then its module chain."""
    table = categories()
    if in_optimizer:
        return "optimizer"
    for cat, patterns in table["by_op"].items():
        if any(re.search(p, op) for p in patterns):
            return cat
    for s in scopes:  # innermost first
        leaf = s.qualname.rsplit(".", 1)[-1]
        for rule in table["by_module"]:
            if any(re.search(p, s.type) for p in rule.get("modules", ())) or any(
                re.search(p, leaf) for p in rule.get("names", ())
            ):
                return rule["category"]
    return "other"


def layer_of(scopes: list[Scope]) -> str:
    """The numbered block an op runs in (``layers.3``), or "" outside every block."""
    pattern = categories()["layer_pattern"]
    for s in reversed(scopes):  # outermost first: the first numbered block from the top
        m = re.search(pattern, s.qualname)
        if m:
            return m.group(1)
    return ""
