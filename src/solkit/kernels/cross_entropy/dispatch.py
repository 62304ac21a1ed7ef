"""Cross-entropy over large vocabularies with the gradient written in the forward, in place.

Math, per row with logits ``x`` (length ``V``), target ``y``, all in fp32:

* optional softcap: ``z = cap * tanh(x / cap)`` (else ``z = x``);
* online softmax in one sweep: running max ``m`` and running sum ``s = sum exp(z - m)``, rescaled by
  ``exp(m_old - m_new)`` when the max grows; ``lse = m + log(s)``, ``p_j = exp(z_j - lse)``;
* loss ``= (1 - eps) (lse - z_y) + eps (lse - mean_j z_j) + lam * lse^2``
  (label smoothing ``eps`` as ``F.cross_entropy(label_smoothing=eps)``; z-loss ``lam``);
* gradient ``dL/dz_j = p_j (1 + 2 lam lse) - eps / V - (1 - eps) [j == y]``, times
  ``dz/dx = 1 - (z / cap)^2`` with softcap; rows whose target is ``ignore_index`` get loss 0, grad 0;
* reduction ``mean`` divides by the number of non-ignored rows (read from device memory, so no host
  sync), ``sum`` by 1, ``none`` keeps per-row losses.

The forward writes ``dL/dx`` (already divided by the mean's count) straight into the logits buffer
(``inplace_grad=True``, the default, when the logits require grad): **the logits are overwritten**.
The backward then only multiplies by the incoming gradient, and skips even that (one scalar load per
row) when it equals 1, as for ``loss.backward()``.

Bytes per call, ``T`` rows x ``V`` classes, ``b`` bytes per logit:

* SOL (forward + backward): one read of the logits and one write of the gradient, ``2·b·T·V``, plus
  ``8·T`` of targets and ``4·T`` of per-row loss. Calls that write the gradient (no softcap) run the
  split-row kernel of :mod:`solkit.kernels.cross_entropy.split`, which moves exactly that (each row cut
  into chunks held by cooperating programs); softcap runs this module's two-sweep kernel, which reads
  each row twice (statistics sweep, then the gradient sweep in reverse, meant to hit L2; it mostly does
  not), so its DRAM traffic is between ``2·b·T·V`` and ``3·b·T·V``: one persistent program per SM walks
  its rows, a loop per sweep, cp.async prefetch of the next blocks (``tl.range(num_stages)``); see
  :data:`CE_CONFIG` for the per-warp / per-thread statistics options.
* forward only (no grad): one read, ``b·T·V`` (the two-sweep kernel's statistics sweep alone).
* backward with ``grad_output == 1``: ~0 bytes; otherwise ``2·b·T·V`` (a read and write of the grad).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common import tuned
from solkit.kernels.common.capability import DeviceCaps, allowed, device_caps
from solkit.kernels.common.device import sm_count
from solkit.kernels.common.exchange import bulk_prefetch_ok, per_sm_for, resident_regs
from solkit.kernels.cross_entropy.paths import PATHS
from solkit.kernels.cross_entropy.split import launch_cross_entropy_split

REDUCTIONS = ("mean", "sum", "none")


@triton.jit
def _softcapped(x, softcap, HAS_SOFTCAP: tl.constexpr):
    if HAS_SOFTCAP:
        x = softcap * (2.0 * tl.sigmoid(2.0 * x / softcap) - 1.0)
    return x


@triton.jit
def _row_stats(x_row, col_start, col_end, softcap, HAS_SOFTCAP: tl.constexpr, HAS_SMOOTHING: tl.constexpr,
               BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr):  # fmt: skip
    """Online softmax over columns [col_start, col_end) of one row, in base 2: returns (max m2, sum of
    2^(z*log2e - m2), sum of z). The max is reduced per block (one scalar); the sum stays per lane and
    is reduced once at the end, so each element costs one exp2."""
    offs = tl.arange(0, BLOCK)
    n_blocks = tl.cdiv(tl.maximum(col_end - col_start, 0), BLOCK)
    m2 = -float("inf")
    lane_sum = tl.zeros([BLOCK], dtype=tl.float32)
    lane_z = tl.zeros([BLOCK], dtype=tl.float32)
    for blk in tl.range(0, n_blocks, num_stages=NUM_STAGES):
        cols = col_start + blk * BLOCK + offs
        mask = cols < col_end
        z = _softcapped(tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32), softcap, HAS_SOFTCAP)
        z2 = tl.where(mask, z * 1.4426950408889634, -float("inf"))
        m2_new = tl.maximum(m2, tl.max(z2, axis=0))
        lane_sum = lane_sum * tl.exp2(m2 - m2_new) + tl.exp2(z2 - m2_new)
        if HAS_SMOOTHING:
            lane_z += tl.where(mask, z, 0.0)
        m2 = m2_new
    return m2, tl.sum(lane_sum, axis=0), tl.sum(lane_z, axis=0)


@triton.jit
def _load_logits(x_row, cols, mask, softcap, HAS_SOFTCAP: tl.constexpr):
    """Logits ``z`` (fp32, softcapped) and ``z * log2e`` with -inf on the padding. Without softcap the
    padding is loaded as -inf: no per-logit select, and ``z * log2e - m`` fuses into one FMA."""
    if HAS_SOFTCAP:
        z = _softcapped(tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32), softcap, HAS_SOFTCAP)
        z2 = tl.where(mask, z * 1.4426950408889634, -float("inf"))
    else:
        z = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        z2 = z * 1.4426950408889634
    return z, z2


@triton.jit
def _row_stats_warps(x_row, col_start, col_end, softcap, HAS_SOFTCAP: tl.constexpr, HAS_SMOOTHING: tl.constexpr,
                     REP: tl.constexpr, WARPS: tl.constexpr, NUM_STAGES: tl.constexpr):  # fmt: skip
    """:func:`_row_stats` with one running max per *warp*: a block is a [REP, WARPS, 256] tile in which
    each warp owns the middle index (256 contiguous logits, 8 per lane), so the per-block max needs
    only shuffles inside a warp and no barrier of the whole program; warps drift apart and overlap
    each other's loads and math. The warps' (max, sum) pairs are combined once per row."""
    offs = tl.arange(0, REP * WARPS * 256)
    n_blocks = tl.cdiv(tl.maximum(col_end - col_start, 0), REP * WARPS * 256)
    m2 = tl.full([1, WARPS, 1], -float("inf"), dtype=tl.float32)  # kept 3-D: no layout change in the loop
    lane_sum = tl.zeros([REP, WARPS, 256], dtype=tl.float32)
    lane_z = tl.zeros([REP, WARPS, 256], dtype=tl.float32)
    for blk in tl.range(0, n_blocks, num_stages=NUM_STAGES):
        cols = col_start + blk * (REP * WARPS * 256) + offs
        mask = cols < col_end
        # loaded flat (8 contiguous logits per lane, 256 per warp, then the next warp), seen as
        # [REP, WARPS, 256]: the same placement, so the reshape moves nothing
        z, z2 = _load_logits(x_row, cols, mask, softcap, HAS_SOFTCAP)
        z2 = tl.reshape(z2, (REP, WARPS, 256))
        m2_new = tl.maximum(m2, tl.max(tl.max(z2, axis=0, keep_dims=True), axis=2, keep_dims=True))
        m_ref = tl.where(m2_new == -float("inf"), 0.0, m2_new)  # a warp that has seen only padding so far
        lane_sum = lane_sum * tl.exp2(m2 - m_ref) + tl.exp2(z2 - m_ref)
        if HAS_SMOOTHING:
            lane_z += tl.reshape(tl.where(mask, z, 0.0), (REP, WARPS, 256))
        m2 = m2_new
    big = tl.max(tl.max(tl.max(m2, axis=2), axis=1), axis=0)
    per_warp = tl.sum(tl.sum(lane_sum, axis=0, keep_dims=True), axis=2, keep_dims=True) * tl.exp2(m2 - big)
    total = tl.sum(tl.sum(tl.sum(per_warp, axis=2), axis=1), axis=0)
    return big, total, tl.sum(tl.sum(tl.sum(lane_z, axis=0), axis=1), axis=0)


@triton.jit
def _row_stats_lanes(x_row, col_start, col_end, softcap, HAS_SOFTCAP: tl.constexpr, HAS_SMOOTHING: tl.constexpr,
                     REP: tl.constexpr, THREADS: tl.constexpr, NUM_STAGES: tl.constexpr):  # fmt: skip
    """:func:`_row_stats_warps` with one running max and sum per *thread*: a block is a [REP, threads, 8]
    tile (8 contiguous logits per thread, as loaded), so a block's statistics need no shuffle and no
    barrier at all; the threads' (max, sum) pairs are combined once per row."""
    offs = tl.arange(0, REP * THREADS * 8)
    n_blocks = tl.cdiv(tl.maximum(col_end - col_start, 0), REP * THREADS * 8)
    m2 = tl.full([1, THREADS, 1], -float("inf"), dtype=tl.float32)
    t_sum = tl.zeros([1, THREADS, 1], dtype=tl.float32)
    lane_z = tl.zeros([REP, THREADS, 8], dtype=tl.float32)
    for blk in tl.range(0, n_blocks, num_stages=NUM_STAGES):
        cols = col_start + blk * (REP * THREADS * 8) + offs
        mask = cols < col_end
        z, z2 = _load_logits(x_row, cols, mask, softcap, HAS_SOFTCAP)
        z2 = tl.reshape(z2, (REP, THREADS, 8))
        m2_new = tl.maximum(m2, tl.max(tl.max(z2, axis=0, keep_dims=True), axis=2, keep_dims=True))
        m_ref = tl.where(m2_new == -float("inf"), 0.0, m2_new)
        blk_sum = tl.sum(tl.sum(tl.exp2(z2 - m_ref), axis=0, keep_dims=True), axis=2, keep_dims=True)
        t_sum = t_sum * tl.exp2(m2 - m_ref) + blk_sum
        if HAS_SMOOTHING:
            lane_z += tl.reshape(tl.where(mask, z, 0.0), (REP, THREADS, 8))
        m2 = m2_new
    big = tl.max(tl.max(tl.max(m2, axis=2), axis=1), axis=0)
    total = tl.sum(tl.sum(tl.sum(t_sum * tl.exp2(m2 - big), axis=2), axis=1), axis=0)
    return big, total, tl.sum(tl.sum(tl.sum(lane_z, axis=0), axis=1), axis=0)


@triton.jit
def _row_grad(x_row, g_row, col_start, col_end, lse2, p_scale, uniform, softcap, HAS_SOFTCAP: tl.constexpr,
              BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr):  # fmt: skip
    """dL/dx over columns [col_start, col_end) except the target's ``- (1 - eps)`` (the caller writes that
    one value afterwards: no compare/select per logit), last block first: the blocks read most recently by
    the statistics sweep are the likeliest to still be in L2."""
    offs = tl.arange(0, BLOCK)
    n_blocks = tl.cdiv(tl.maximum(col_end - col_start, 0), BLOCK)
    for i in tl.range(0, n_blocks, num_stages=NUM_STAGES):
        cols = col_start + (n_blocks - 1 - i) * BLOCK + offs
        mask = cols < col_end
        z = _softcapped(tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32), softcap, HAS_SOFTCAP)
        g = tl.exp2(z * 1.4426950408889634 - lse2) * p_scale - uniform
        if HAS_SOFTCAP:
            g = g * (1.0 - (z / softcap) * (z / softcap))
        tl.store(g_row + cols, g.to(g_row.dtype.element_ty), mask=mask)


@triton.jit
def _target_logit(x_row, target, n_cols, softcap, HAS_SOFTCAP: tl.constexpr):
    in_range = (target >= 0) & (target < n_cols)
    return _softcapped(tl.load(x_row + tl.where(in_range, target, 0)).to(tl.float32), softcap, HAS_SOFTCAP)


@triton.jit
def _row_loss(x_row, target, n_cols, lse, sum_z, label_smoothing, z_loss_scale, softcap,
              HAS_SOFTCAP: tl.constexpr, HAS_SMOOTHING: tl.constexpr):  # fmt: skip
    z_t = _target_logit(x_row, target, n_cols, softcap, HAS_SOFTCAP)
    loss = lse - z_t
    if HAS_SMOOTHING:
        loss = (1.0 - label_smoothing) * loss + label_smoothing * (lse - sum_z / n_cols)
    return loss + z_loss_scale * lse * lse


@triton.jit
def _zero_grad(g_row, col_start, col_end, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for start in range(col_start, col_end, BLOCK):
        cols = start + offs
        tl.store(g_row + cols, tl.zeros([BLOCK], dtype=g_row.dtype.element_ty), mask=cols < col_end)


@triton.jit
def _ce_fwd_kernel(
    logits_ptr, grad_ptr, targets_ptr, loss_ptr, lse_ptr, n_valid_ptr,
    n_rows, n_cols, logits_row_stride, grad_row_stride,
    ignore_index, label_smoothing, z_loss_scale, softcap,
    MEAN: tl.constexpr, HAS_SOFTCAP: tl.constexpr, HAS_SMOOTHING: tl.constexpr,
    WRITE_GRAD: tl.constexpr, BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr, WARP_STATS: tl.constexpr = 0,
):  # fmt: skip
    """One program per row (or a persistent loop over rows): both sweeps over the whole row. WARP_STATS =
    w > 0: the statistics sweep keeps one running max per warp (:func:`_row_stats_warps`, w = num_warps);
    -w: one per thread (:func:`_row_stats_lanes`)."""
    pid = tl.program_id(0)
    if MEAN:
        grad_scale = 1.0 / tl.maximum(tl.load(n_valid_ptr).to(tl.float32), 1.0)
    else:
        grad_scale = 1.0
    for row in range(pid, n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x_row = logits_ptr + row64 * logits_row_stride
        g_row = grad_ptr + row64 * grad_row_stride
        target = tl.load(targets_ptr + row64).to(tl.int32)
        if target == ignore_index:
            tl.store(loss_ptr + row64, 0.0)
            tl.store(lse_ptr + row64, 0.0)
            if WRITE_GRAD:
                _zero_grad(g_row, 0, n_cols, BLOCK)
        else:
            if WARP_STATS < 0:  # -w: one running max per thread (w warps)
                m2, s, sum_z = _row_stats_lanes(x_row, 0, n_cols, softcap, HAS_SOFTCAP, HAS_SMOOTHING,
                                                BLOCK // (-WARP_STATS * 256), -WARP_STATS * 32, NUM_STAGES)  # fmt: skip
            elif WARP_STATS > 0:
                m2, s, sum_z = _row_stats_warps(x_row, 0, n_cols, softcap, HAS_SOFTCAP, HAS_SMOOTHING,
                                                BLOCK // (WARP_STATS * 256), WARP_STATS, NUM_STAGES)  # fmt: skip
            else:
                m2, s, sum_z = _row_stats(x_row, 0, n_cols, softcap, HAS_SOFTCAP, HAS_SMOOTHING, BLOCK, NUM_STAGES)
            lse2 = m2 + tl.log2(s)
            lse = lse2 * 0.6931471805599453
            loss = _row_loss(x_row, target, n_cols, lse, sum_z, label_smoothing, z_loss_scale, softcap,
                             HAS_SOFTCAP, HAS_SMOOTHING)  # fmt: skip
            tl.store(loss_ptr + row64, loss)
            tl.store(lse_ptr + row64, lse)
            if WRITE_GRAD:
                z_t = _target_logit(x_row, target, n_cols, softcap, HAS_SOFTCAP)
                tl.debug_barrier()  # the target logit is read by every warp before the gradient overwrites it
                p_scale = (1.0 + 2.0 * z_loss_scale * lse) * grad_scale
                uniform = label_smoothing / n_cols * grad_scale
                hit = (1.0 - label_smoothing) * grad_scale
                _row_grad(x_row, g_row, 0, n_cols, lse2, p_scale, uniform, softcap, HAS_SOFTCAP, BLOCK, NUM_STAGES)
                # the target column: p - eps/V - (1 - eps), written after the sweep's own store there
                g_t = tl.exp2(z_t * 1.4426950408889634 - lse2) * p_scale - uniform - hit
                if HAS_SOFTCAP:
                    g_t = g_t * (1.0 - (z_t / softcap) * (z_t / softcap))
                tl.debug_barrier()
                if (target >= 0) & (target < n_cols):
                    tl.store(g_row + target, g_t.to(g_row.dtype.element_ty))


@triton.jit
def _scale_rows_kernel(
    grad_ptr, n_rows, n_cols, row_stride, scale_ptr, scale_stride, BLOCK: tl.constexpr,
):  # fmt: skip
    """grad[row] *= scale[row * scale_stride]; rows whose scale is exactly 1 are left untouched."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    for row in range(pid, n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        scale = tl.load(scale_ptr + row64 * scale_stride).to(tl.float32)
        if scale != 1.0:
            g_row = grad_ptr + row64 * row_stride
            for start in range(0, n_cols, BLOCK):
                cols = start + offs
                mask = cols < n_cols
                g = tl.load(g_row + cols, mask=mask, other=0.0).to(tl.float32)
                tl.store(g_row + cols, (g * scale).to(grad_ptr.dtype.element_ty), mask=mask)


#: Launch settings (``configs.yaml``, entry ``launch``: what each key does and the measurements behind it). Keys the
#: caller passes as ``config`` win.
CE_CONFIG = tuned.load("cross_entropy", "launch")

#: What the last launch ran (path, and for the split kernel its chunks, grid, registers): benchmarks record it.
LAST_LAUNCH: dict = {}


@functools.cache
def _measured(cc: tuple[int, int] | None) -> bool:
    return tuned.for_arch(CE_CONFIG, cc)[1]


def arch_config(cfg: dict, user: dict, caps: DeviceCaps, runs: tuple[str, ...], elem_bytes: int) -> dict:
    """``cfg`` for this device: the split kernels' skew 3-5 only where the packed path runs (else the plain skew
    0), the bulk L2 prefetch only where it exists. Where the settings were not measured on this architecture,
    what the caller did not set is derived: split programs per SM and their register cap from the register file,
    and the two-sweep kernel's pipeline stages cut until its staged blocks (``stages - 1`` of ``block`` logits)
    fit the part's shared memory per program."""
    out = dict(cfg)
    if out["split_skew"] and "packed" not in runs:
        out["split_skew"] = 0
    if not bulk_prefetch_ok(caps):
        out["split_l2_prefetch"] = 0
    if _measured(caps.cc) or caps.regs_per_sm is None:
        return out
    if "split_programs_per_sm" not in user:
        out["split_programs_per_sm"] = per_sm_for(caps, False, out["split_programs_per_sm"], out["split_warps"])
    if out["split_maxnreg"] and "split_maxnreg" not in user:
        out["split_maxnreg"] = resident_regs(out["split_programs_per_sm"], out["split_warps"], caps.regs_per_sm)
    if caps.smem_per_block and "num_stages" not in user:
        while out["num_stages"] > 1 and (out["num_stages"] - 1) * out["block"] * elem_bytes > caps.smem_per_block:
            out["num_stages"] -= 1
    return out


def _grid(n_rows: int, t: torch.Tensor, programs_per_sm: int) -> int:
    if programs_per_sm <= 0:
        return max(n_rows, 1)
    return max(1, min(n_rows, programs_per_sm * sm_count(t)))


def _check(logits: torch.Tensor, targets: torch.Tensor, reduction: str, label_smoothing: float,
           softcap: float | None) -> None:  # fmt: skip
    if logits.dim() != 2:
        raise SolkitError(f"cross_entropy: logits must be [tokens, vocab], got shape {tuple(logits.shape)}")
    if logits.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise SolkitError(f"cross_entropy: logits dtype must be fp16, bf16 or fp32, got {logits.dtype}")
    if targets.shape != logits.shape[:1] or targets.dtype not in (torch.int64, torch.int32):
        raise SolkitError(
            f"cross_entropy: targets must be int32/int64 of shape [{logits.shape[0]}], "
            f"got {targets.dtype} {tuple(targets.shape)}"
        )
    if reduction not in REDUCTIONS:
        raise SolkitError(f"cross_entropy: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise SolkitError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if softcap is not None and softcap <= 0:
        raise SolkitError(f"cross_entropy: softcap must be positive or None, got {softcap}")


def launch_cross_entropy_rows(
    logits: torch.Tensor, targets: torch.Tensor, losses: torch.Tensor, lse: torch.Tensor, n_valid: torch.Tensor,
    *, grad: torch.Tensor | None, mean: bool, ignore_index: int, label_smoothing: float, z_loss_scale: float,
    softcap: float | None, config: dict | None = None,
) -> None:  # fmt: skip
    """Low-level launch: per-row loss and lse into ``losses``/``lse`` (fp32, [T]); with ``grad``, the
    gradient of ``sum(losses) / n_valid`` (``mean``) or ``sum(losses)`` into it. ``n_valid`` is a
    device scalar, so callers (e.g. chunked fused linear CE) can pass a count over all chunks."""
    user = dict(config or {})
    cfg = {**CE_CONFIG, **user}
    n_rows, n_cols = logits.shape
    if not (n_rows and n_cols):
        return
    LAST_LAUNCH.clear()
    caps = device_caps(logits)
    runs = allowed(PATHS["cross_entropy"], caps, "cross_entropy")
    if grad is None and not cfg["split_fwd"]:
        # forward only (no gradient to write): the two-sweep kernel's statistics sweep alone reads the logits once
        # and is faster than the split kernel (configs.yaml, split_fwd); keys the caller set still win
        fwd = {k[4:]: v for k, v in cfg.items() if k.startswith("fwd_")}
        cfg = {**cfg, "split_block": 0, **fwd, **{k: v for k, v in user.items() if not k.startswith("fwd_")}}
    cfg = arch_config(cfg, user, caps, runs, logits.element_size())
    if softcap is None and cfg["split_block"] > 0 and "split" in runs:
        info = launch_cross_entropy_split(
            logits, targets, losses, lse, n_valid, grad=grad, mean=mean, ignore_index=ignore_index,
            label_smoothing=label_smoothing, z_loss_scale=z_loss_scale, block=cfg["split_block"],
            num_warps=cfg["split_warps"], programs_per_sm=cfg["split_programs_per_sm"],
            keep_exp=bool(cfg["split_keep_exp"]), prefetch=bool(cfg["split_prefetch"]),
            tagged=bool(cfg["split_tagged"]), skew=int(cfg["split_skew"]), maxnreg=cfg["split_maxnreg"] or None,
            max_spins=int(cfg["split_max_spins"]), pass2_bf16=bool(cfg.get("split_pass2_bf16", 1)),
            early_load=bool(cfg.get("split_early_load", 1)), unroll=int(cfg.get("split_unroll", 1)),
            full_chunks=bool(cfg.get("split_full_chunks", 0)), l2_prefetch=int(cfg.get("split_l2_prefetch", 0)),
        )  # fmt: skip
        if info is not None:
            LAST_LAUNCH.update(path="split", **info)
            return
    LAST_LAUNCH.update(path="two_sweep")
    block = min(cfg["block"], triton.next_power_of_2(max(n_cols, 16)))
    scalars = (ignore_index, float(label_smoothing), float(z_loss_scale), float(softcap or 1.0))
    grad_arg, grad_stride = (grad, grad.stride(0)) if grad is not None else (logits, 0)
    # warp (1) or thread (2) statistics need a block of whole [warps x 256] tiles; passed as +w / -w
    whole = block % (cfg["num_warps"] * 256) == 0
    warp_stats = {1: cfg["num_warps"], 2: -cfg["num_warps"]}.get(cfg.get("warp_stats", 0), 0) if whole else 0
    _ce_fwd_kernel[(_grid(n_rows, logits, cfg["programs_per_sm"]),)](
        logits, grad_arg, targets, losses, lse, n_valid, n_rows, n_cols, logits.stride(0), grad_stride, *scalars,
        MEAN=mean, HAS_SOFTCAP=softcap is not None, HAS_SMOOTHING=label_smoothing > 0, WRITE_GRAD=grad is not None,
        BLOCK=block, NUM_STAGES=cfg["num_stages"], WARP_STATS=warp_stats, num_warps=cfg["num_warps"],
    )  # fmt: skip


def cross_entropy_forward(
    logits: torch.Tensor, targets: torch.Tensor, *, ignore_index: int = -100, label_smoothing: float = 0.0,
    z_loss_scale: float = 0.0, softcap: float | None = None, reduction: str = "mean",
    grad: torch.Tensor | None = None, config: dict | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Loss, z-loss (same reduction) and the per-row lse; with ``grad`` given ([T, V], may be ``logits``
    itself), also writes ``d loss / d logits`` (for a unit incoming gradient) into it."""
    _check(logits, targets, reduction, label_smoothing, softcap)
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    n_rows = logits.shape[0]
    targets = targets.contiguous()
    losses = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    lse = torch.empty(n_rows, dtype=torch.float32, device=logits.device)
    valid = targets != ignore_index
    n_valid = valid.sum()
    launch_cross_entropy_rows(
        logits, targets, losses, lse, n_valid, grad=grad, mean=reduction == "mean", ignore_index=ignore_index,
        label_smoothing=label_smoothing, z_loss_scale=z_loss_scale, softcap=softcap, config=config,
    )  # fmt: skip
    z_losses = torch.where(valid, z_loss_scale * lse * lse, 0.0)
    if reduction == "none":
        return losses, z_losses, lse
    if reduction == "sum":
        return losses.sum(), z_losses.sum(), lse
    return losses.sum() / n_valid, z_losses.sum() / n_valid, lse


def scale_grad_rows_(grad: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """In place ``grad *= scale`` (scalar, or one value per row of a 2-D grad); no-op rows where scale == 1."""
    grad2 = grad.view(grad.shape[0], -1) if grad.dim() != 2 else grad
    if grad2.stride(-1) != 1:
        raise SolkitError("cross_entropy: gradient buffer must have a contiguous last dimension")
    scale = scale.to(device=grad.device).reshape(-1)
    n_rows, n_cols = grad2.shape
    if scale.numel() not in (1, n_rows):
        raise SolkitError(f"cross_entropy: grad scale must be a scalar or [{n_rows}], got {scale.numel()} values")
    if n_rows and n_cols:
        block = min(8192, triton.next_power_of_2(max(n_cols, 16)))
        _scale_rows_kernel[(_grid(n_rows, grad, 4),)](
            grad2, n_rows, n_cols, grad2.stride(0), scale, 0 if scale.numel() == 1 else scale.stride(0),
            BLOCK=block, num_warps=16 if block >= 8192 else 4,
        )  # fmt: skip
    return grad


def cross_entropy_bytes(rows: int, vocab: int, dtype: torch.dtype, backward: bool = True) -> int:
    """SOL bytes: one read of the logits (+ one write of the gradient when ``backward``) + targets/loss."""
    elem = torch.empty((), dtype=dtype).element_size()
    return elem * rows * vocab * (2 if backward else 1) + 12 * rows
