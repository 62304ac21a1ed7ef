"""Tuned launch settings are data: one ``configs.yaml`` per kernel family, read by :func:`load`.

Each top-level entry of a family's file is one kernel's settings and carries a ``source:`` naming the
results file (under ``benchmarks/results/``) whose measurements justify it; a list names several. The
loader refuses an entry without one, so a setting cannot land without its evidence. The history of how
the values were found belongs in ``docs/``, not beside the numbers.

Two lookups turn an entry into the settings for one call:

* :func:`for_width` applies an entry's ``by_width`` overrides (row width ``W`` -> keys that change for
  rows at least ``W`` wide, padded to a power of two);
* :func:`for_arch` applies an entry's ``by_arch`` overrides (``sm_80``, ``sm_90``, ...) for the device's
  architecture and says whether the settings were measured there; where they were not, the family derives
  them from the device's limits (shared memory, SM count, registers), never from another part's tuning;
* :func:`path_options` decides whether an optional path is taken, from the caller's choice or the
  entry's ``ranges`` of row widths.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import Any

import torch
import triton
import yaml

from solkit.errors import SolkitError
from solkit.kernels.common.device import interpreting


@functools.cache
def _read(family: str) -> dict[str, Any]:
    name = f"solkit/kernels/{family}/configs.yaml"
    try:
        text = resources.files(f"solkit.kernels.{family}").joinpath("configs.yaml").read_text()
        data = yaml.safe_load(text)
    except (FileNotFoundError, ModuleNotFoundError) as e:
        raise SolkitError(f"{name}: not found ({e})") from e
    except yaml.YAMLError as e:
        raise SolkitError(f"{name}: not valid YAML ({e})") from e
    if not isinstance(data, dict):
        raise SolkitError(f"{name}: expected a mapping of entry names to settings")
    for key, entry in data.items():
        if not isinstance(entry, dict):
            raise SolkitError(f"{name}: {key}: expected a mapping of settings")
        src = entry.get("source")
        sources = [src] if isinstance(src, str) else src
        if not sources or not all(isinstance(s, str) and s for s in sources):
            raise SolkitError(f"{name}: {key}: needs a source: naming the results file that justifies it")
    return data


def load(family: str, entry: str | None = None) -> dict[str, Any]:
    """The settings of ``family`` (all entries, or one ``entry``), without their ``source`` keys.

    A fresh copy each call: callers (and tests) may change what they get without touching the cache."""
    data = _read(family)
    if entry is None:
        return {k: _strip(v) for k, v in data.items()}
    if entry not in data:
        raise SolkitError(f"solkit/kernels/{family}/configs.yaml: no entry {entry!r}; have {', '.join(data)}")
    return _strip(data[entry])


def sources(family: str) -> dict[str, list[str]]:
    """Entry name -> the results files named by its ``source:``."""
    out = {}
    for k, v in _read(family).items():
        out[k] = [v["source"]] if isinstance(v["source"], str) else list(v["source"])
    return out


def _strip(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: copy.deepcopy(v) for k, v in entry.items() if k != "source"}


def path_options(choice, explicit: tuple, t: torch.Tensor, ranges, usable=None) -> dict | None:
    """Launch options of an optional kernel path, or None when it is not taken.

    ``choice`` is the caller's argument for the path: a dict (those options) or True (the launcher's defaults)
    takes it, False refuses it. With ``choice`` None the path is a default only for 16-bit rows on a GPU (not
    under the interpreter), when no other path was chosen explicitly (``explicit``: their arguments), when
    ``usable()`` (if given) says so, and when the width lies in one of ``ranges`` ``(min_cols, max_cols or None,
    options)``."""
    if choice is None:
        if any(v is not None for v in explicit) or not t.is_cuda or interpreting():
            return None
        if t.dtype not in (torch.bfloat16, torch.float16) or (usable is not None and not usable()):
            return None
        n = t.shape[-1]
        for lo, hi, opts in ranges:
            if n >= lo and (hi is None or n <= hi):
                return dict(opts)
        return None
    if isinstance(choice, dict):
        return dict(choice)
    return {} if choice else None


def for_width(config: dict, n_cols: int) -> dict:
    """``config`` with its per-width overrides applied: ``config["by_width"]`` maps a row width ``W`` to
    the keys that change for rows of at least ``W`` columns (padded to a power of two); the widest
    ``W`` that applies wins. Launch settings stay data, chosen per shape."""
    block_n = triton.next_power_of_2(n_cols)
    widths = [w for w in sorted(config.get("by_width", {})) if w <= block_n]
    return {**config, **(config["by_width"][widths[-1]] if widths else {})}


def arch_key(cc: tuple[int, int] | None) -> str:
    """``"sm_90"`` for ``(9, 0)``; ``"interpreter"`` for no compute capability."""
    return "interpreter" if cc is None else f"sm_{cc[0]}{cc[1]}"


def for_arch(entry: dict[str, Any], cc: tuple[int, int] | None) -> tuple[dict[str, Any], bool]:
    """``entry`` with its ``by_arch`` overrides for compute capability ``cc`` applied, and whether the entry
    was measured on that architecture (its ``measured_on`` list, default ``["sm_90"]``, names it).

    An entry without ``by_arch`` is returned as it is; the flag tells the caller to derive what depends on
    the part (tiles that must fit its shared memory, programs per SM) instead of trusting the numbers."""
    key = arch_key(cc)
    out = {k: copy.deepcopy(v) for k, v in entry.items() if k not in ("by_arch", "measured_on")}
    out.update(copy.deepcopy(entry.get("by_arch", {}).get(key, {})))
    measured = key in entry.get("measured_on", ["sm_90"]) or key in entry.get("by_arch", {})
    return out, measured
