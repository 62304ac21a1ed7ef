"""``solkit.patch``'s measured settings, read from ``configs.yaml`` beside this module.

Each entry carries a ``source:`` naming the results file (under ``benchmarks/results/``) that justifies it;
an entry without one, or a value this module cannot use, is one :class:`~solkit.errors.SolkitError` naming
the file and the field.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml

from solkit.errors import SolkitError

NAME = "solkit/swap/configs.yaml"


@functools.cache
def _read() -> dict[str, Any]:
    try:
        data = yaml.safe_load(resources.files("solkit.swap").joinpath("configs.yaml").read_text())
    except (FileNotFoundError, yaml.YAMLError) as exc:
        raise SolkitError(f"{NAME}: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise SolkitError(f"{NAME}: expected a mapping of entry names to settings")
    for key, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("source"), str) or not entry["source"]:
            raise SolkitError(f"{NAME}: {key}: needs a source: naming the results file that justifies it")
    return data


def entry(name: str) -> dict[str, Any]:
    data = _read()
    if name not in data:
        raise SolkitError(f"{NAME}: no entry {name!r}; have {', '.join(data)}")
    return dict(data[name])


def sdpa_priority() -> tuple[Any, ...]:
    """The attention swap's SDPA backends (``torch.nn.attention.SDPBackend``), first choice first."""
    from torch.nn.attention import SDPBackend

    names = entry("attention").get("sdpa_priority")
    if not isinstance(names, list) or not names:
        raise SolkitError(f"{NAME}: attention.sdpa_priority: expected a non-empty list of SDPA backend names")
    out = []
    for n in names:
        backend = getattr(SDPBackend, str(n).upper(), None)
        if backend is None or backend == SDPBackend.ERROR:
            have = ", ".join(b.lower() for b in SDPBackend.__members__ if b != "ERROR")
            raise SolkitError(f"{NAME}: attention.sdpa_priority: unknown backend {n!r}; have {have}")
        out.append(backend)
    return tuple(out)


def loss_chunk_tokens(vocab: int, itemsize: int) -> int:
    """Tokens per chunk of the fused loss: the largest power of two whose ``[chunk, vocab]`` logits buffer
    fits ``logits_buffer_mib``, within ``[min_chunk_tokens, max_chunk_tokens]``."""
    e = entry("fused_linear_ce")
    try:
        budget, lo, hi = (int(e[k]) for k in ("logits_buffer_mib", "min_chunk_tokens", "max_chunk_tokens"))
    except (KeyError, TypeError, ValueError) as exc:
        raise SolkitError(f"{NAME}: fused_linear_ce: needs integer logits_buffer_mib, min_chunk_tokens and "
                          f"max_chunk_tokens ({exc})") from None  # fmt: skip
    if not 1 <= lo <= hi or budget < 1:
        raise SolkitError(f"{NAME}: fused_linear_ce: need 1 <= min_chunk_tokens <= max_chunk_tokens, budget >= 1")
    fit = (budget << 20) // max(vocab * itemsize, 1)
    chunk = 1 << max(fit, 1).bit_length() - 1
    return max(lo, min(hi, chunk))
