"""Which softmax path runs a call: a pure function of the row width, the dtype and the device, so the default
choice can be read (and tested) without a GPU.

A call gets an ordered list of ``(path, options)`` candidates; :mod:`solkit.kernels.softmax.dispatch` launches the
first that accepts the tensors (a path may decline at run time: rows not aligned, a group that cannot be resident)
and the last one, single-block or looped, always runs.

* No path asked for (``path=None``): the optional paths whose ``configs.yaml`` ``ranges`` hold the width (16-bit
  rows on a GPU; forward: TMA, then rows, then packed; backward: packed), then the base path: single-block for
  rows up to ``single.max_cols``, else split-row where its default says so (``"auto"``: one row per SM would
  overflow the L2), then looped.
* ``path`` one of :data:`FORWARD_PATHS` / :data:`BACKWARD_PATHS`, with ``options`` its launch overrides: that path
  first; an optional path that declines leaves the defaults of the ones after it (TMA, rows, packed, base), as a
  split-row launch that cannot be resident leaves the looped path.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from solkit.errors import SolkitError
from solkit.kernels.common import tuned
from solkit.kernels.softmax.packed import default_packed_options
from solkit.kernels.softmax.rows import ROWS_CONFIG, ROWS_DEFAULT, row_pieces
from solkit.kernels.softmax.tma import TMA_DEFAULT

#: Paths ``softmax_forward(path=...)`` takes, and ``softmax_backward``'s (rows and TMA are forward-only).
FORWARD_PATHS = ("single", "looped", "rows", "packed", "tma", "split")
BACKWARD_PATHS = ("single", "looped", "packed", "split")

#: Single-block path (``configs.yaml`` ``single``): widest row kept whole in registers, streaming stores and warps
#: by row block width.
SINGLE = tuned.load("softmax", "single")
#: Looped path (``looped``): chunk widths, forward and backward.
LOOPED = tuned.load("softmax", "looped")
#: Split-row path (``split``) by direction: ``default`` (True, False or ``"auto"``) and its launch options.
SPLIT_CONFIG = tuned.load("softmax", "split")

_OPTIONAL = {"fwd": ("tma", "rows", "packed"), "bwd": ("packed",)}
_SIXTEEN_BIT = (torch.bfloat16, torch.float16)


class Target(NamedTuple):
    """What the path choice needs to know of the device: a GPU (not the interpreter), its SMs and L2 bytes."""

    gpu: bool
    sms: int = 0
    l2_bytes: int = 0


def plan(direction: str, n_cols: int, dtype: torch.dtype, target: Target, path: str | None = None,
         options: dict | None = None) -> list[tuple[str, dict]]:  # fmt: skip
    """The ``(path, options)`` candidates of a ``direction`` ("fwd" or "bwd") call on rows of ``n_cols``, in the
    order they are tried (see the module docstring). Raises :class:`SolkitError` for an unknown path or options
    without a path."""
    paths = FORWARD_PATHS if direction == "fwd" else BACKWARD_PATHS
    if path is not None and path not in paths:
        raise SolkitError(f"softmax {direction}: unknown path {path!r}; paths: {', '.join(paths)}")
    if options is not None and path is None:
        raise SolkitError(f"softmax {direction}: options {options!r} need a path= to apply to")
    optional = _OPTIONAL[direction]
    first = optional.index(path) if path in optional else (0 if path is None else len(optional))
    chain = []
    for name in optional[first:]:
        opts = dict(options or {}) if name == path else _default_options(name, direction, n_cols, dtype, target)
        if opts is not None and _fits(name, n_cols, opts):
            chain.append((name, opts))
    if path in ("single", "looped", "split"):
        chain.append((path, dict(options or {})))
        if path == "split":
            chain.append(("looped", {}))
    elif n_cols <= SINGLE["max_cols"]:
        chain.append(("single", {}))
    else:
        if _split_by_default(direction, n_cols, dtype, target):
            chain.append(("split", {}))
        chain.append(("looped", {}))
    return chain


def default_path(direction: str, n_cols: int, dtype: torch.dtype, target: Target) -> str:
    """The first path a call with no path asked for tries (one that may still decline at run time)."""
    return plan(direction, n_cols, dtype, target)[0][0]


def _default_options(name: str, direction: str, n_cols: int, dtype: torch.dtype, target: Target) -> dict | None:
    """An optional path's launch options when it is the default for this width, else None: 16-bit rows on a GPU
    only (the measured case)."""
    if not target.gpu or dtype not in _SIXTEEN_BIT:
        return None
    if name == "packed":
        return default_packed_options(direction, n_cols, dtype)
    ranges = TMA_DEFAULT["ranges"] if name == "tma" else ROWS_DEFAULT["ranges"]
    for lo, hi, opts in ranges:
        if n_cols >= lo and (hi is None or n_cols <= hi):
            return dict(opts)
    return None


def _fits(name: str, n_cols: int, opts: dict) -> bool:
    """The width conditions a path checks before launching: TMA views rows as 256-column blocks; the rows path
    covers a row exactly with up to three tiles."""
    if name == "tma":
        return n_cols % 256 == 0
    if name == "rows":
        nw = opts.get("num_warps") or ROWS_CONFIG["num_warps"]
        return row_pieces(n_cols, nw, int(opts.get("vec") or ROWS_CONFIG["vec"])) is not None
    return True


def _split_by_default(direction: str, n_cols: int, dtype: torch.dtype, target: Target) -> bool:
    """``SPLIT_CONFIG`` ``default``: ``"auto"`` splits when one row per SM (the looped path's rows in flight) would
    not fit in the L2, so the looped path's second read would come from DRAM; True / False always / never. GPU
    only (the interpreter runs programs one by one)."""
    choice = SPLIT_CONFIG[direction]["default"]
    if not target.gpu:
        return False
    if choice == "auto":
        return target.sms * n_cols * torch.empty((), dtype=dtype).element_size() > target.l2_bytes
    return bool(choice)
