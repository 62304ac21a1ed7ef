"""solkit kernels that cover an operator, with the speed-up the bench measured (data/kernels.yaml)."""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Any

import yaml


@functools.cache
def kernel_table() -> dict[str, Any]:
    return yaml.safe_load(resources.files("solkit.model").joinpath("data/kernels.yaml").read_text())


def kernel_for(op: str, category: str, module_type: str) -> dict[str, Any] | None:
    """The first solkit kernel whose categories hold ``category`` and whose ops or module patterns match."""
    for k in kernel_table()["kernels"]:
        if category not in k["categories"]:
            continue
        ops, mods = k.get("ops"), k.get("modules")
        if not ops and not mods:
            return k
        if (ops and op in ops) or (mods and module_type and any(re.search(p, module_type) for p in mods)):
            return k
    return None


def kernel_advice(op: str, category: str, module_type: str) -> str:
    """One sentence naming the kernel and its measured speed-ups, or "" when solkit has none for the op."""
    k = kernel_for(op, category, module_type)
    if k is None:
        return ""
    parts = [
        f"{row} {k['speedup_vs_eager'][row]:.2f}x vs eager"
        + (f", {k['speedup_vs_compile'][row]:.2f}x vs torch.compile" if row in k.get("speedup_vs_compile", {}) else "")
        for row in k["bench_rows"]
        if row in k["speedup_vs_eager"]
    ]
    src = kernel_table()["source"]
    return f"solkit has {k['kernel']} (solkit bench, Llama-3-8B shapes: {'; '.join(parts)}; {src})"
