"""Prefill attention forward: ``O = softmax(Q K^T scale [+ causal mask]) V`` per head, FlashAttention-2 style.

One program owns ``BLOCK_M`` query rows of one q head and streams the keys and values of its kv head
(``h // group``: GQA reads the shared kv head, never a repeated copy) in ``BLOCK_N`` tiles, keeping the
online softmax in registers: running max ``m``, running sum ``l`` and the unnormalised output ``acc``::

    s = q k^T (scale log2 e)            # the scale folded into the exp2 argument: one FMA per score
    m' = max(m, rowmax s);  p = 2^(s - m');  a = 2^(m - m')
    l = a l + rowsum p;     acc = a acc + p v;  m = m'
    O = acc / l;            LSE = m + log2 l (base 2, saved for the backward)

Causal: tiles wholly left of the program's diagonal block run without a mask; only the tiles that cross the
diagonal (``BLOCK_M / BLOCK_N`` of them, or one when ``BLOCK_N`` is the larger) are masked, and tiles right of it
are never visited (half the work skipped). The
heaviest query blocks (last rows) are launched first, so the short ones fill the tail of the grid.

On sm_90 the ``tma`` path loads Q, K, V and stores O through device-side tensor descriptors (the TMA engine,
bounds per sequence, zero fill past the end), and Triton's pipeliner keeps ``num_stages`` K/V tiles in flight;
``warp_spec`` asks Triton to warp-specialise the key loop (producer/consumer partitions), where the Triton
build supports it. The portable path loads with pointers and masks (sm_80 and later, and the interpreter).

FLOPs and bytes (``B`` batch, ``Hq``/``Hkv`` heads, ``S`` tokens, ``D`` head_dim, ``e`` bytes per element):

* FLOPs: two GEMMs per (query, key) pair, ``Q K^T`` and ``P V``, ``2 D`` each: ``4 B Hq S^2 D``
  non-causal; causal counts the lower triangle only, ``4 B Hq S^2 D / 2`` (the suite's ``attention_causal``
  row counts the same, ``2 B Hq S^2 D``). The exp2 (``B Hq S^2 / 2`` causal) runs on the SFU, not counted.
* bytes: read Q, K, V once and write O and the fp32 logsumexp: ``e B S D (2 Hq + 2 Hkv) + 4 B Hq S``.
* ``T_SOL = max(FLOPs / bf16 tensor peak, bytes / bandwidth)``: compute-bound from ``S`` of a few hundred on
  (Llama-3-8B heads, 8k tokens causal: 0.55e12 FLOPs against 0.17 GB, 3200 FLOP per byte).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.attention.layout import Geometry
from solkit.kernels.common.device import use_descriptor_scratch

LOG2E = 1.4426950408889634


def attention_flops(geo: Geometry, causal: bool, cu_seqlens: torch.Tensor | None = None) -> float:
    """Forward FLOPs as documented above (varlen: summed over the sequences; needs their lengths on the host)."""
    if geo.varlen:
        lens = (cu_seqlens[1:] - cu_seqlens[:-1]).double().cpu()
        pairs = float((lens * lens).sum())
        return 4.0 * geo.heads_q * geo.head_dim * pairs / (2.0 if causal else 1.0)
    return 4.0 * geo.batch * geo.heads_q * geo.seqlen_q * geo.seqlen_k * geo.head_dim / (2.0 if causal else 1.0)


def attention_bytes(geo: Geometry, elem: int) -> float:
    """Forward bytes as documented above (dense or varlen: ``tokens`` rows of each tensor)."""
    rows = geo.tokens
    kv_rows = rows if geo.varlen else geo.batch * geo.seqlen_k
    return float(elem * geo.head_dim * (2 * rows * geo.heads_q + 2 * kv_rows * geo.heads_kv) + 4 * rows * geo.heads_q)


@triton.jit
def _fwd_step(acc, l_i, m_i, qk, v, offs_m, offs_n, seqlen_k, qk_scale, sm_scale, CAUSAL_MASK: tl.constexpr,
              BOUNDS: tl.constexpr, FOLD: tl.constexpr, LAZY: tl.constexpr, EAGER: tl.constexpr):  # fmt: skip
    """One key tile's scores ``qk`` (unscaled) and values ``v`` into the online softmax.

    ``FOLD``: the scale folded into the exp2 argument (``m`` in base 2 of the scaled scores: one FMA per score);
    else the scores are scaled, then ``exp`` (``m`` natural). ``LAZY``: a row keeps its stale maximum unless the
    tile's exceeds it by more than 2^8 (``p`` stays below 256, exact after the final division) and the
    accumulator is rescaled only when some row of the block moved, which skips ``BLOCK_M x D`` multiplies per
    tile on most tiles. ``EAGER``: the accumulator is kept normalised by the running sum every tile (no
    division at the end; the costlier form, kept to measure what deferring saves)."""
    if CAUSAL_MASK:
        qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, float("-inf"))
    if BOUNDS:
        qk = tl.where((offs_n < seqlen_k)[None, :], qk, float("-inf"))
    if FOLD:
        m_tile = tl.max(qk, 1) * qk_scale
    else:
        qk = qk * sm_scale
        m_tile = tl.max(qk, 1)
    if LAZY:
        m_new = tl.where(m_tile > m_i + 8.0, m_tile, m_i)
    else:
        m_new = tl.maximum(m_i, m_tile)
    if FOLD:
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
    else:
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
    if EAGER:
        l_new = l_i * alpha + tl.sum(p, 1)
        r = 1.0 / l_new
        acc = tl.dot((p * r[:, None]).to(v.dtype), v, acc * (alpha * l_i * r)[:, None])
        l_i = l_new
    elif LAZY:
        if tl.max((m_new > m_i).to(tl.int32), 0) > 0:  # some row's maximum moved: rescale the block
            acc = acc * alpha[:, None]
            l_i = l_i * alpha
        l_i = l_i + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc)
    else:
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.jit
def _load_kv(ref, start_n, stride, seqlen_k, USE_TMA: tl.constexpr, BOUNDS: tl.constexpr, BLOCK_N: tl.constexpr,
             HEAD_DIM: tl.constexpr):  # fmt: skip
    """A ``BLOCK_N x HEAD_DIM`` tile of K or V from row ``start_n``: a descriptor load (zero fill past the end) or
    a pointer load (masked past ``seqlen_k`` when ``BOUNDS``)."""
    if USE_TMA:
        t = ref.load([start_n, 0])
    else:
        offs = (start_n + tl.arange(0, BLOCK_N))[:, None] * stride + tl.arange(0, HEAD_DIM)[None, :]
        if BOUNDS:
            t = tl.load(ref + offs, mask=((start_n + tl.arange(0, BLOCK_N)) < seqlen_k)[:, None], other=0.0)
        else:
            t = tl.load(ref + offs)
    return t


@triton.jit
def _fwd_range(acc, l_i, m_i, q, K, V, stride_ks, stride_vs, lo, hi, offs_m, seqlen_k, qk_scale, sm_scale,
               CAUSAL_MASK: tl.constexpr, BOUNDS: tl.constexpr, USE_TMA: tl.constexpr, BLOCK_N: tl.constexpr,
               HEAD_DIM: tl.constexpr, WARP_SPEC: tl.constexpr, FOLD: tl.constexpr, LAZY: tl.constexpr,
               EAGER: tl.constexpr, PIPE: tl.constexpr):  # fmt: skip
    """Key tiles ``[lo, hi)`` into the online softmax. ``CAUSAL_MASK``: mask keys right of the query (the diagonal
    tiles); ``BOUNDS``: mask keys past ``seqlen_k`` (the tail tile). K/V are descriptors (TMA) or base pointers.
    ``PIPE`` (FlashAttention-3's intra-warpgroup overlap): the next tile's ``Q K^T`` is issued before this tile's
    softmax, so the tensor cores have work while the softmax runs (one more score tile live in registers)."""
    if PIPE:
        if hi > lo:
            last = lo + ((hi - lo - 1) // BLOCK_N) * BLOCK_N
            qk = tl.dot(q, tl.trans(_load_kv(K, lo, stride_ks, seqlen_k, USE_TMA, BOUNDS, BLOCK_N, HEAD_DIM)))
            for start_n in tl.range(lo, last, BLOCK_N, warp_specialize=WARP_SPEC):
                k_next = _load_kv(K, start_n + BLOCK_N, stride_ks, seqlen_k, USE_TMA, BOUNDS, BLOCK_N, HEAD_DIM)
                qk_next = tl.dot(q, tl.trans(k_next))
                v = _load_kv(V, start_n, stride_vs, seqlen_k, USE_TMA, BOUNDS, BLOCK_N, HEAD_DIM)
                acc, l_i, m_i = _fwd_step(acc, l_i, m_i, qk, v, offs_m, start_n + tl.arange(0, BLOCK_N), seqlen_k,
                                          qk_scale, sm_scale, CAUSAL_MASK, BOUNDS, FOLD, LAZY, EAGER)  # fmt: skip
                qk = qk_next
            v = _load_kv(V, last, stride_vs, seqlen_k, USE_TMA, BOUNDS, BLOCK_N, HEAD_DIM)
            acc, l_i, m_i = _fwd_step(acc, l_i, m_i, qk, v, offs_m, last + tl.arange(0, BLOCK_N), seqlen_k, qk_scale,
                                      sm_scale, CAUSAL_MASK, BOUNDS, FOLD, LAZY, EAGER)  # fmt: skip
    else:
        for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPEC):
            k = _load_kv(K, start_n, stride_ks, seqlen_k, USE_TMA, BOUNDS, BLOCK_N, HEAD_DIM)
            v = _load_kv(V, start_n, stride_vs, seqlen_k, USE_TMA, BOUNDS, BLOCK_N, HEAD_DIM)
            acc, l_i, m_i = _fwd_step(acc, l_i, m_i, tl.dot(q, tl.trans(k)), v, offs_m, start_n + tl.arange(0, BLOCK_N),
                                      seqlen_k, qk_scale, sm_scale, CAUSAL_MASK, BOUNDS, FOLD, LAZY, EAGER)  # fmt: skip
    return acc, l_i, m_i


@triton.jit
def attention_fwd_kernel(Q, K, V, Out, LSE, CU,
                         stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                         stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                         seqlen_q, seqlen_k, qk_scale, sm_scale, HEADS_Q,
                         GROUP, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, USE_TMA: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                         WARP_SPEC: tl.constexpr, SPLIT_DIAG: tl.constexpr, FOLD: tl.constexpr, LAZY: tl.constexpr,
                         EAGER: tl.constexpr, PIPE: tl.constexpr):  # fmt: skip
    """Grid ``(cdiv(seqlen_q, BLOCK_M), batch * HEADS_Q)``.
    ``SPLIT_DIAG`` (causal): the tiles left of the diagonal block in an unmasked loop, the diagonal ones in a
    masked loop; else one loop masking every tile."""
    pid_m = tl.program_id(0)
    if CAUSAL:  # the longest rows first
        pid_m = tl.num_programs(0) - 1 - pid_m
    pid_bh = tl.program_id(1)
    b = pid_bh // HEADS_Q
    h = pid_bh % HEADS_Q
    hk = h // GROUP
    start = 0
    if VARLEN:
        start = tl.load(CU + b)
        seqlen_q = tl.load(CU + b + 1) - start
        seqlen_k = seqlen_q
    start_m = pid_m * BLOCK_M
    if start_m >= seqlen_q:
        return
    start64 = start.to(tl.int64)
    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh + start64 * stride_qs
    k_base = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh + start64 * stride_ks
    v_base = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh + start64 * stride_vs
    o_base = Out + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh + start64 * stride_os
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    if USE_TMA:
        q_desc = tl.make_tensor_descriptor(q_base, shape=[seqlen_q, HEAD_DIM], strides=[stride_qs, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])  # fmt: skip
        k_ref = tl.make_tensor_descriptor(k_base, shape=[seqlen_k, HEAD_DIM], strides=[stride_ks, 1],
                                          block_shape=[BLOCK_N, HEAD_DIM])  # fmt: skip
        v_ref = tl.make_tensor_descriptor(v_base, shape=[seqlen_k, HEAD_DIM], strides=[stride_vs, 1],
                                          block_shape=[BLOCK_N, HEAD_DIM])  # fmt: skip
        q = q_desc.load([start_m, 0])
    else:
        k_ref = k_base
        v_ref = v_base
        q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :], mask=(offs_m < seqlen_q)[:, None],
                    other=0.0)  # fmt: skip
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # (lo, hi, mask, bounds) of the unmasked range, then of the masked one
    if CAUSAL:  # the masked tiles: from the key tile holding the block's first query (block_n may exceed block_m)
        diag_lo = (start_m // BLOCK_N) * BLOCK_N if SPLIT_DIAG else 0
        lo1, hi1, lo2, hi2 = 0, diag_lo, diag_lo, tl.minimum(start_m + BLOCK_M, seqlen_k)
    else:
        full = (seqlen_k // BLOCK_N) * BLOCK_N
        lo1, hi1, lo2, hi2 = 0, full, full, seqlen_k
    acc, l_i, m_i = _fwd_range(acc, l_i, m_i, q, k_ref, v_ref, stride_ks, stride_vs, lo1, hi1, offs_m, seqlen_k,
                               qk_scale, sm_scale, False, False, USE_TMA, BLOCK_N, HEAD_DIM, WARP_SPEC, FOLD, LAZY,
                               EAGER, PIPE)  # fmt: skip
    acc, l_i, m_i = _fwd_range(acc, l_i, m_i, q, k_ref, v_ref, stride_ks, stride_vs, lo2, hi2, offs_m, seqlen_k,
                               qk_scale, sm_scale, CAUSAL, True, USE_TMA, BLOCK_N, HEAD_DIM, False, FOLD, LAZY, EAGER,
                               False)  # fmt: skip
    if not EAGER:
        acc = acc / l_i[:, None]
    if FOLD:
        lse = m_i + tl.math.log2(l_i)
    else:
        lse = (m_i + tl.log(l_i)) * 1.4426950408889634
    row_ok = offs_m < seqlen_q
    lse_base = LSE + b.to(tl.int64) * stride_lb + h.to(tl.int64) * stride_lh + start64
    tl.store(lse_base + offs_m, lse, mask=row_ok)
    if USE_TMA:
        o_desc = tl.make_tensor_descriptor(o_base, shape=[seqlen_q, HEAD_DIM], strides=[stride_os, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])  # fmt: skip
        o_desc.store([start_m, 0], acc.to(Out.dtype.element_ty))
    else:
        tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :], acc.to(Out.dtype.element_ty),
                 mask=row_ok[:, None])  # fmt: skip


#: The forward's structure knobs (launch options and configs.yaml keys), each with its allowed values, the default
#: first: ``causal_loop`` split (unmasked tiles, then the masked diagonal) or one masked loop; ``exp2_fold``
#: the scale folded into exp2 (1) or scores scaled then ``exp`` (0); ``rescale`` the accumulator every tile or
#: lazily (only when a row's maximum grew by more than 2^8); ``normalise`` once at the end (deferred) or every
#: tile (eager); ``pipeline`` 1: the next tile's ``Q K^T`` issued before this tile's softmax.
STRUCTURE: dict[str, tuple] = {
    "causal_loop": ("split", "one"),
    "exp2_fold": (1, 0),
    "rescale": ("always", "lazy"),
    "normalise": ("deferred", "eager"),
    "pipeline": (0, 1),
}


def structure(config: dict) -> dict:
    """The structure knobs of ``config`` (missing ones at their defaults); a value not allowed is a one-line
    SolkitError naming the knob."""
    out = {}
    for knob, allowed in STRUCTURE.items():
        value = config.get(knob, allowed[0])
        if isinstance(value, bool):
            value = int(value)
        if value not in allowed:
            raise SolkitError(f"attention: fwd option {knob}={value!r} not allowed; allowed: {list(allowed)}")
        out[knob] = value
    return out


def forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    geo: Geometry,
    causal: bool,
    scale: float,
    cu_seqlens: torch.Tensor | None,
    config: dict,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the forward with ``config``; returns ``(out, lse)``, ``out`` shaped and strided like ``q`` (or the
    ``out`` given, which must be). ``config``: the tile (``block_m``, ``block_n``), ``num_warps``, ``num_stages``,
    ``tma``, the structure knobs of :data:`STRUCTURE` (each defaults to its first value) and ``compile``, options
    passed to the Triton compiler as they are (``maxnreg``, or whatever the installed build takes)."""
    bm, bn = int(config["block_m"]), int(config["block_n"])
    knobs = structure(config)
    if out is None:  # varlen: tokens past cu_seqlens[-1] belong to no sequence and read 0
        out = torch.zeros_like(q) if geo.varlen else torch.empty_like(q)
    lse = torch.empty(geo.lse_shape(), dtype=torch.float32, device=q.device)
    if geo.seqlen_q == 0 or geo.batch == 0:
        return out, lse
    use_tma = bool(config.get("tma", False))
    if use_tma:
        use_descriptor_scratch()
    cu = cu_seqlens if cu_seqlens is not None else lse  # unread when dense: any pointer will do
    grid = (triton.cdiv(geo.seqlen_q, bm), geo.batch * geo.heads_q)
    extra = dict(config.get("compile") or {})  # compiler options of the Triton build (maxnreg, ...)
    attention_fwd_kernel[grid](
        q, k, v, out, lse, cu, *geo.strides(q), *geo.strides(k), *geo.strides(v), *geo.strides(out),
        *geo.lse_strides(), geo.seqlen_q, geo.seqlen_k, scale * LOG2E, scale, geo.heads_q,
        GROUP=geo.group, CAUSAL=causal, VARLEN=geo.varlen, USE_TMA=use_tma, BLOCK_M=bm, BLOCK_N=bn,
        HEAD_DIM=geo.head_dim, WARP_SPEC=bool(config.get("warp_spec", False)),
        SPLIT_DIAG=knobs["causal_loop"] == "split", FOLD=bool(knobs["exp2_fold"]), LAZY=knobs["rescale"] == "lazy",
        EAGER=knobs["normalise"] == "eager", PIPE=bool(knobs["pipeline"]),
        num_warps=int(config["num_warps"]), num_stages=int(config["num_stages"]), **extra,
    )  # fmt: skip
    return out, lse
