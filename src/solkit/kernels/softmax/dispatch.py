"""Row softmax over the last dimension: the public entry points, forward and backward, rows up to 256k wide.

Math, per row ``x`` of ``N`` elements, fp32 arithmetic, one rounding of the output:

    m  = max(x),   s = sum(exp(x - m)),   y = exp(x - m) / s
    backward:  dx = y * (dy - sum(y * dy))

Paths (``path=`` of :func:`softmax_forward` / :func:`softmax_backward`; None: the default by width, dtype and
device, :mod:`solkit.kernels.softmax.plan`, among the paths the device can run,
:data:`~solkit.kernels.softmax.paths.PATHS`; ``options=``: that path's launch overrides):

* ``"single"`` (:mod:`~solkit.kernels.softmax.blocks`): the whole row in registers; one read, one write. Options:
  ``block_m``, ``num_warps``, ``maxnreg``, ``store_cs``, ``one_row`` (forward);
* ``"looped"`` (:mod:`~solkit.kernels.softmax.blocks`): two streaming passes, the second in reverse to hit L2.
  Options: ``block``, ``num_warps``, ``maxnreg``, ``prefetch``;
* ``"rows"`` (forward, 16-bit rows that tile exactly; :mod:`~solkit.kernels.softmax.rows`): persistent programs
  hold a whole row as up to three power-of-two tiles of int32 words, no masked lanes;
* ``"packed"`` (:mod:`~solkit.kernels.softmax.packed`): ``S`` resident programs per row keep their chunk in
  registers and exchange ``(max, sum)`` (backward: ``sum(y * dy)``) as tagged 64-bit words: one read, one write;
* ``"tma"`` (forward, 16-bit; :mod:`~solkit.kernels.softmax.tma`): the packed exchange with each chunk a TMA box
  staged through shared memory, so the chunks in flight hold no registers;
* ``"split"`` (:mod:`~solkit.kernels.softmax.split`): programs split each row into segments, publish per-segment
  statistics and re-read their segment from L2: one DRAM read. Options: ``segment``, ``chunk``, ``num_warps``,
  ``per_sm``, ``lookahead``.

Bytes per call (the minimum the benchmark scores against), ``M x N`` of ``e`` bytes:

    fwd: read M*N*e            write M*N*e
    bwd: read 2*M*N*e (y, dy)  write M*N*e
"""

from __future__ import annotations

import functools

import torch

from solkit.errors import SolkitError
from solkit.kernels.common import tuned
from solkit.kernels.common.capability import device_caps
from solkit.kernels.common.exchange import per_sm_for
from solkit.kernels.common.rows import check_rows, row_config, warps_for
from solkit.kernels.softmax.blocks import backward_looped, backward_single, forward_looped, forward_single
from solkit.kernels.softmax.packed import softmax_backward_packed, softmax_forward_packed
from solkit.kernels.softmax.plan import LOOPED, SINGLE, SPLIT_CONFIG, plan
from solkit.kernels.softmax.rows import softmax_forward_rows
from solkit.kernels.softmax.split import launch_split
from solkit.kernels.softmax.tma import softmax_forward_tma

_SINGLE_KEYS = {"block_m", "num_warps", "maxnreg", "store_cs", "one_row"}
_LOOPED_KEYS = {"block", "num_warps", "maxnreg", "prefetch"}
_SPLIT_KEYS = {"segment", "chunk", "num_warps", "per_sm", "lookahead"}


@functools.cache
def _split_measured(cc: tuple[int, int] | None) -> bool:
    return tuned.for_arch(SPLIT_CONFIG, cc)[1]


def _split_options(direction: str, opts: dict, t: torch.Tensor) -> dict:
    """The split-row path's options: ``SPLIT_CONFIG``'s with ``opts`` over them; programs per SM as tuned where
    measured, else derived from the device's register file (unless asked for)."""
    cfg = {**SPLIT_CONFIG[direction], **_checked("split", opts, _SPLIT_KEYS)}
    if "per_sm" not in opts:
        caps = device_caps(t)
        cfg["per_sm"] = per_sm_for(caps, _split_measured(caps.cc), cfg["per_sm"], cfg["num_warps"])
    return cfg


def _checked(path: str, opts: dict, allowed: set) -> dict:
    unknown = set(opts) - allowed
    if unknown:
        raise SolkitError(f"softmax path {path!r}: unknown options {sorted(unknown)}; allowed: {sorted(allowed)}")
    return opts


def _single_geometry(n_cols: int, elem_bytes: int, opts: dict) -> tuple[int, int, int]:
    """``(BLOCK_M, BLOCK_N, num_warps)`` of the single-block path: :func:`row_config`'s, or ``block_m`` rows with
    their warps, ``num_warps`` winning."""
    bm, bn, nw = row_config(n_cols, elem_bytes)
    if opts.get("block_m"):
        bm, nw = opts["block_m"], max(warps_for(opts["block_m"] * bn, elem_bytes), 4)
    return bm, bn, opts.get("num_warps") or nw


def _single_store_cs(bn: int, opts: dict) -> int:
    return int(SINGLE["store_cs"].get(bn, 0) if opts.get("store_cs") is None else opts["store_cs"])


def _looped_geometry(direction: str, elem_bytes: int, opts: dict) -> tuple[int, int]:
    block = opts.get("block") or LOOPED[f"block_{direction}"]
    return block, opts.get("num_warps") or max(warps_for(block, elem_bytes), 4)


def _forward_path(name: str, opts: dict, x2: torch.Tensor, y2: torch.Tensor) -> bool:
    """Run forward path ``name`` with ``opts``; False when it declined (nothing launched)."""
    if name == "tma":
        return softmax_forward_tma(x2, y2, **opts) is not None
    if name == "rows":
        return softmax_forward_rows(x2, y2, **opts) is not None
    if name == "packed":
        return softmax_forward_packed(x2, y2, **opts) is not None
    if name == "split":
        cfg = _split_options("fwd", opts, x2)
        return launch_split(False, (x2, x2, y2), (x2.stride(0), x2.stride(0), y2.stride(0)), cfg)
    if name == "looped":
        block, nw = _looped_geometry("fwd", x2.element_size(), _checked(name, opts, _LOOPED_KEYS))
        forward_looped(x2, y2, block, nw, prefetch=opts.get("prefetch", True), maxnreg=opts.get("maxnreg"))
        return True
    bm, bn, nw = _single_geometry(x2.shape[1], x2.element_size(), _checked(name, opts, _SINGLE_KEYS))
    one_row = SINGLE["one_row"] if opts.get("one_row") is None else opts["one_row"]
    forward_single(x2, y2, bm, bn, nw, store_cs=_single_store_cs(bn, opts), one_row=one_row,
                   maxnreg=opts.get("maxnreg"))  # fmt: skip
    return True


def _backward_path(name: str, opts: dict, dy2: torch.Tensor, y2: torch.Tensor, dx2: torch.Tensor) -> bool:
    """Run backward path ``name`` with ``opts``; False when it declined (nothing launched)."""
    if name == "packed":
        return softmax_backward_packed(dy2, y2, dx2, **opts) is not None
    if name == "split":
        cfg = _split_options("bwd", opts, y2)
        return launch_split(True, (dy2, y2, dx2), (dy2.stride(0), y2.stride(0), dx2.stride(0)), cfg)
    if name == "looped":
        block, nw = _looped_geometry("bwd", y2.element_size(), _checked(name, opts, _LOOPED_KEYS))
        backward_looped(dy2, y2, dx2, block, nw, prefetch=opts.get("prefetch", True), maxnreg=opts.get("maxnreg"))
        return True
    bm, bn, nw = _single_geometry(y2.shape[1], y2.element_size(), _checked(name, opts, _SINGLE_KEYS))
    if bm == 1 and not (opts.get("num_warps") or opts.get("block_m")):
        nw = SINGLE["bwd_warps"].get(bn, nw)
    backward_single(dy2, y2, dx2, bm, bn, nw, store_cs=_single_store_cs(bn, opts), maxnreg=opts.get("maxnreg"))
    return True


def softmax_forward(x: torch.Tensor, *, path: str | None = None, options: dict | None = None) -> torch.Tensor:
    """Softmax over the last dimension of ``x`` (any leading shape). ``path``: one of
    :data:`~solkit.kernels.softmax.plan.FORWARD_PATHS` (None: the default by width, dtype and device);
    ``options``: that path's launch overrides (see the module docstring and the path's launcher)."""
    x2 = check_rows(x, "softmax input", max_cols=None)
    y2 = torch.empty_like(x2)
    for name, opts in plan("fwd", x2.shape[1], x2.dtype, device_caps(x2), path, options):
        if _forward_path(name, opts, x2, y2):
            return y2.view(x.shape)
    raise SolkitError(f"softmax forward: no path ran for shape {tuple(x.shape)}")  # (the base path always runs)


def softmax_backward(dy: torch.Tensor, y: torch.Tensor, *, path: str | None = None,
                     options: dict | None = None) -> torch.Tensor:  # fmt: skip
    """Gradient of softmax: ``dx = y * (dy - sum(y * dy))`` over the last dimension. ``path``: one of
    :data:`~solkit.kernels.softmax.plan.BACKWARD_PATHS` (None: the default), ``options`` its overrides."""
    y2 = check_rows(y, "softmax saved output", max_cols=None)
    dy2 = check_rows(dy, "softmax grad_output", max_cols=None)
    dx2 = torch.empty_like(y2)
    for name, opts in plan("bwd", y2.shape[1], y2.dtype, device_caps(y2), path, options):
        if _backward_path(name, opts, dy2, y2, dx2):
            return dx2.view(y.shape)
    raise SolkitError(f"softmax backward: no path ran for shape {tuple(y.shape)}")
