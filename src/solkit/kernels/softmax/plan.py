"""Which softmax path runs a call: a pure function of the row width, the dtype and the device's capabilities
(:class:`~solkit.kernels.common.capability.DeviceCaps`), so the default choice can be read (and tested) without a
GPU, for any product (``caps_for_product``).

A call gets an ordered list of ``(path, options)`` candidates; :mod:`solkit.kernels.softmax.dispatch` launches the
first that accepts the tensors (a path may decline at run time: rows not aligned, a group that cannot be resident)
and the last one, single-block or looped, always runs.

* The device first: only the optional paths whose needs it meets (:data:`~solkit.kernels.softmax.paths.PATHS`,
  :func:`~solkit.kernels.common.capability.allowed`) are candidates; under ``portable_only`` none is.
* No path asked for (``path=None``): the allowed optional paths whose ``configs.yaml`` ``ranges`` hold the width
  (16-bit rows on a GPU; forward: TMA, then rows, then packed; backward: packed), with their programs per SM
  derived for a part they were not measured on, then the base path: single-block for rows up to
  ``single.max_cols``, else split-row where its default says so (``"auto"``: one row per SM would overflow the
  L2), then looped.
* ``path`` one of :data:`FORWARD_PATHS` / :data:`BACKWARD_PATHS`, with ``options`` its launch overrides: that path
  first; an optional path that declines (or that the device cannot run) leaves the defaults of the ones after it
  (TMA, rows, packed, base), as a split-row launch that cannot be resident leaves the looped path. The
  interpreter runs an optional path asked for by name (its Triton form: no inline PTX, descriptors emulated), so
  the tests reach every path's code on the CPU.
"""

from __future__ import annotations

import torch

from solkit.errors import SolkitError
from solkit.kernels.common import tuned
from solkit.kernels.common.capability import DeviceCaps, allowed, forced_portable
from solkit.kernels.softmax.packed import PACKED_CONFIG, default_packed_options, packed_per_sm
from solkit.kernels.softmax.paths import PATHS
from solkit.kernels.softmax.rows import ROWS_CONFIG, ROWS_DEFAULT, row_pieces, rows_per_sm
from solkit.kernels.softmax.tma import TMA_CONFIG, TMA_DEFAULT, tma_per_sm

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


def plan(direction: str, n_cols: int, dtype: torch.dtype, caps: DeviceCaps, path: str | None = None,
         options: dict | None = None) -> list[tuple[str, dict]]:  # fmt: skip
    """The ``(path, options)`` candidates of a ``direction`` ("fwd" or "bwd") call on rows of ``n_cols`` on a device
    with ``caps``, in the order they are tried (see the module docstring). Raises :class:`SolkitError` for an
    unknown path or options without a path."""
    paths = FORWARD_PATHS if direction == "fwd" else BACKWARD_PATHS
    if path is not None and path not in paths:
        raise SolkitError(f"softmax {direction}: unknown path {path!r}; paths: {', '.join(paths)}")
    if options is not None and path is None:
        raise SolkitError(f"softmax {direction}: options {options!r} need a path= to apply to")
    optional = _OPTIONAL[direction]
    first = optional.index(path) if path in optional else (0 if path is None else len(optional))
    runs = allowed(PATHS[f"softmax_{direction}"], caps, f"softmax_{direction}")
    chain = []
    for name in optional[first:]:
        asked = name == path
        if name not in runs and not (asked and caps.is_interpreter and not forced_portable()):
            continue
        opts = dict(options or {}) if asked else _default_options(name, direction, n_cols, dtype, caps)
        if opts is not None and _fits(name, n_cols, opts):
            chain.append((name, opts))
    if path in ("single", "looped", "split"):
        chain.append((path, dict(options or {})))
        if path == "split":
            chain.append(("looped", {}))
    elif n_cols <= SINGLE["max_cols"]:
        chain.append(("single", {}))
    else:
        if _split_by_default(direction, n_cols, dtype, caps):
            chain.append(("split", {}))
        chain.append(("looped", {}))
    return chain


def default_path(direction: str, n_cols: int, dtype: torch.dtype, caps: DeviceCaps) -> str:
    """The first path a call with no path asked for tries (one that may still decline at run time)."""
    return plan(direction, n_cols, dtype, caps)[0][0]


def _default_options(name: str, direction: str, n_cols: int, dtype: torch.dtype, caps: DeviceCaps) -> dict | None:
    """An optional path's launch options when it is the default for this width, else None: 16-bit rows on a GPU
    only (the measured case). Programs per SM as tuned where measured, else derived from ``caps``."""
    if caps.is_interpreter or dtype not in _SIXTEEN_BIT:
        return None
    if name == "packed":
        opts = default_packed_options(direction, n_cols, dtype)
        if opts is not None and "per_sm" in opts:
            cfg = tuned.for_width(PACKED_CONFIG[direction], n_cols)
            opts["per_sm"] = packed_per_sm(caps, opts["per_sm"], opts.get("num_warps") or cfg["num_warps"])
        return opts
    ranges = TMA_DEFAULT["ranges"] if name == "tma" else ROWS_DEFAULT["ranges"]
    for lo, hi, opts in ranges:
        if n_cols >= lo and (hi is None or n_cols <= hi):
            return _arch_options(name, dict(opts), caps)
    return None


def _arch_options(name: str, opts: dict, caps: DeviceCaps) -> dict:
    """A default range's options with ``per_sm`` for this part (:func:`~.tma.tma_per_sm`, :func:`~.rows.rows_per_sm`:
    the tuned value where measured)."""
    if "per_sm" not in opts:
        return opts
    if name == "tma":
        cfg = {**TMA_CONFIG, **opts}
        opts["per_sm"] = tma_per_sm(caps, opts["per_sm"], cfg["num_warps"], cfg["blocks"], cfg["stages"])
    else:
        opts["per_sm"] = rows_per_sm(caps, opts["per_sm"], opts.get("num_warps") or ROWS_CONFIG["num_warps"])
    return opts


def _fits(name: str, n_cols: int, opts: dict) -> bool:
    """The width conditions a path checks before launching: TMA views rows as 256-column blocks; the rows path
    covers a row exactly with up to three tiles."""
    if name == "tma":
        return n_cols % 256 == 0
    if name == "rows":
        nw = opts.get("num_warps") or ROWS_CONFIG["num_warps"]
        return row_pieces(n_cols, nw, int(opts.get("vec") or ROWS_CONFIG["vec"])) is not None
    return True


def _split_by_default(direction: str, n_cols: int, dtype: torch.dtype, caps: DeviceCaps) -> bool:
    """``SPLIT_CONFIG`` ``default``: ``"auto"`` splits when one row per SM (the looped path's rows in flight) would
    not fit in the L2 (50 MiB where the device does not say), so the looped path's second read would come from
    DRAM; True / False always / never. GPU only (the interpreter runs programs one by one)."""
    choice = SPLIT_CONFIG[direction]["default"]
    if caps.is_interpreter:
        return False
    if choice == "auto":
        l2 = caps.l2_bytes or 50 * 2**20
        return caps.sm_count * n_cols * torch.empty((), dtype=dtype).element_size() > l2
    return bool(choice)
