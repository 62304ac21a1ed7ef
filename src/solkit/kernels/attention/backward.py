"""Prefill attention backward, FlashAttention-2 structure: a preprocess, a dK/dV kernel, a dQ kernel.

With ``s = q k^T scale``, ``p = softmax(s)`` recomputed from the forward's saved logsumexp (``p = 2^(s log2 e -
LSE)``), and ``dO`` the output's gradient::

    delta_i = sum_d dO_id O_id                    # preprocess: one read of O and dO
    dV = P^T dO;  dP = dO V^T;  dS = P (dP - delta);  dK = scale dS^T Q;  dQ = scale dS K

* ``attention_bwd_dkdv_kernel``: one program per (key block, kv head) holds K, V and fp32 dK, dV accumulators,
  and loops over the q heads of its GQA group and their query blocks, so a kv head's gradients are summed over
  its group in registers (no atomics, no repeated K/V). Causal: query blocks above the key block are never
  visited, only the diagonal ones are masked.
* ``attention_bwd_dq_kernel``: one program per (query block, q head) holds Q, dO and an fp32 dQ accumulator and
  loops over the key blocks left of (and on) its diagonal.

FLOPs: the GEMMs a backward needs are ``dV``, ``dP``, ``dK``, ``dQ`` plus the recomputed ``S``: 5 of the
forward's 2 per (query, key) pair, the conventional ``2.5 x`` the forward (causal: ``2.5 x 4 B Hq S^2 D / 2``;
the suite's ``attention_causal_bwd`` row counts forward and backward, ``7 B Hq S^2 D``). This structure
recomputes ``S`` and ``dP`` in both kernels, 7 GEMMs executed for the 5 counted, so its own ceiling is 5/7 of
the tensor peak for the backward; the price of needing neither atomics nor a ``dS`` round trip through memory.
Bytes: read Q, K, V, O, dO and the logsumexp, write dQ, dK, dV and delta (fp32):
``e B S D (4 Hq + 4 Hkv) + 12 B Hq S`` (the keys' reads repeat per query block but hit L2).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.kernels.attention.layout import Geometry
from solkit.kernels.attention.prefill import LOG2E
from solkit.kernels.common.device import use_descriptor_scratch


@triton.jit
def attention_bwd_delta_kernel(Out, DO, DELTA, CU, stride_ob, stride_oh, stride_os, stride_db, stride_dh, stride_ds,
                               stride_lb, stride_lh, seqlen, HEADS_Q, VARLEN: tl.constexpr, BLOCK_M: tl.constexpr,
                               HEAD_DIM: tl.constexpr):  # fmt: skip
    """``delta = rowsum(dO * O)`` in fp32, laid out like the logsumexp. Grid ``(cdiv(S, BLOCK_M), B * Hq)``."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // HEADS_Q
    h = pid_bh % HEADS_Q
    start = 0
    if VARLEN:
        start = tl.load(CU + b)
        seqlen = tl.load(CU + b + 1) - start
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seqlen
    start64 = start.to(tl.int64)
    o = tl.load(Out + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh + (start64 + offs_m[:, None]) * stride_os
                + offs_d[None, :], mask=row_ok[:, None], other=0.0)  # fmt: skip
    do = tl.load(DO + b.to(tl.int64) * stride_db + h.to(tl.int64) * stride_dh + (start64 + offs_m[:, None]) * stride_ds
                 + offs_d[None, :], mask=row_ok[:, None], other=0.0)  # fmt: skip
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + b.to(tl.int64) * stride_lb + h.to(tl.int64) * stride_lh + start64 + offs_m, delta, mask=row_ok)


@triton.jit
def _dkdv_range(dk, dv, k, v, q_ref, do_ref, lse_base, delta_base, dq_base, stride_qs, stride_ds, stride_dqs, lo,
                hi, offs_n, seqlen_q, qk_scale, sm_scale, MASK: tl.constexpr, USE_TMA: tl.constexpr,
                ATOMIC_DQ: tl.constexpr, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
    """Query blocks ``[lo, hi)`` of one q head into a key block's dK, dV. Rows past ``seqlen_q`` load a zero
    query and an infinite logsumexp, so their ``p`` is 0 and they add nothing. ``MASK``: the diagonal blocks.
    Q and dO are descriptors (TMA) or base pointers. ``ATOMIC_DQ``: also add this block's share of dQ
    (``scale dS K``) into the fp32 accumulator at ``dq_base`` (the 5-GEMM backward; no dQ kernel)."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_m in tl.range(lo, hi, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        row_ok = offs_m < seqlen_q
        if USE_TMA:
            q = q_ref.load([start_m, 0])
            do = do_ref.load([start_m, 0])
        else:
            q = tl.load(q_ref + offs_m[:, None] * stride_qs + offs_d[None, :], mask=row_ok[:, None], other=0.0)
            do = tl.load(do_ref + offs_m[:, None] * stride_ds + offs_d[None, :], mask=row_ok[:, None], other=0.0)
        lse = tl.load(lse_base + offs_m, mask=row_ok, other=float("inf"))
        delta = tl.load(delta_base + offs_m, mask=row_ok, other=0.0)
        p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])  # [BLOCK_N, BLOCK_M]
        if MASK:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(ds_t.to(q.dtype), q, dk)
        if ATOMIC_DQ:
            dq = tl.dot(tl.trans(ds_t.to(k.dtype)), k) * sm_scale  # [BLOCK_M, HEAD_DIM]
            tl.atomic_add(dq_base + offs_m[:, None] * stride_dqs + offs_d[None, :], dq, mask=row_ok[:, None],
                          sem="relaxed")  # fmt: skip
    return dk, dv


@triton.jit
def attention_bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, CU,
                              stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                              stride_vb, stride_vh, stride_vs, stride_db, stride_dh, stride_ds,
                              stride_dkb, stride_dkh, stride_dks, stride_dvb, stride_dvh, stride_dvs,
                              stride_lb, stride_lh, DQA, stride_dqab, stride_dqah, stride_dqas,
                              seqlen_q, seqlen_k, qk_scale, sm_scale, HEADS_KV,
                              GROUP, CAUSAL: tl.constexpr, VARLEN: tl.constexpr, USE_TMA: tl.constexpr,
                              ATOMIC_DQ: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              HEAD_DIM: tl.constexpr):  # fmt: skip
    """Grid ``(cdiv(seqlen_k, BLOCK_N), batch * HEADS_KV)``; causal needs ``BLOCK_N % BLOCK_M == 0``."""
    pid_n = tl.program_id(0)  # causal: the first key blocks, which most query blocks see, launch first
    pid_bh = tl.program_id(1)
    b = pid_bh // HEADS_KV
    hk = pid_bh % HEADS_KV
    start = 0
    if VARLEN:
        start = tl.load(CU + b)
        seqlen_q = tl.load(CU + b + 1) - start
        seqlen_k = seqlen_q
    start_n = pid_n * BLOCK_N
    if start_n >= seqlen_k:
        return
    start64 = start.to(tl.int64)
    b64 = b.to(tl.int64)
    hk64 = hk.to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    col_ok = (offs_n < seqlen_k)[:, None]
    kv_row = start64 + offs_n[:, None]
    if USE_TMA:
        k = tl.make_tensor_descriptor(K + b64 * stride_kb + hk64 * stride_kh + start64 * stride_ks,
                                      shape=[seqlen_k, HEAD_DIM], strides=[stride_ks, 1],
                                      block_shape=[BLOCK_N, HEAD_DIM]).load([start_n, 0])  # fmt: skip
        v = tl.make_tensor_descriptor(V + b64 * stride_vb + hk64 * stride_vh + start64 * stride_vs,
                                      shape=[seqlen_k, HEAD_DIM], strides=[stride_vs, 1],
                                      block_shape=[BLOCK_N, HEAD_DIM]).load([start_n, 0])  # fmt: skip
    else:
        k = tl.load(K + b64 * stride_kb + hk64 * stride_kh + kv_row * stride_ks + offs_d[None, :], mask=col_ok,
                    other=0.0)  # fmt: skip
        v = tl.load(V + b64 * stride_vb + hk64 * stride_vh + kv_row * stride_vs + offs_d[None, :], mask=col_ok,
                    other=0.0)  # fmt: skip
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    for g in range(GROUP):
        h64 = (hk * GROUP + g).to(tl.int64)
        q_ref = Q + b64 * stride_qb + h64 * stride_qh + start64 * stride_qs
        do_ref = DO + b64 * stride_db + h64 * stride_dh + start64 * stride_ds
        if USE_TMA:  # descriptors of BLOCK_M-row boxes, bounded by the sequence
            q_ref = tl.make_tensor_descriptor(q_ref, shape=[seqlen_q, HEAD_DIM], strides=[stride_qs, 1],
                                              block_shape=[BLOCK_M, HEAD_DIM])  # fmt: skip
            do_ref = tl.make_tensor_descriptor(do_ref, shape=[seqlen_q, HEAD_DIM], strides=[stride_ds, 1],
                                               block_shape=[BLOCK_M, HEAD_DIM])  # fmt: skip
        lse_base = LSE + b64 * stride_lb + h64 * stride_lh + start64
        delta_base = DELTA + b64 * stride_lb + h64 * stride_lh + start64
        dq_base = DQA + b64 * stride_dqab + h64 * stride_dqah + start64 * stride_dqas
        if CAUSAL:
            dk, dv = _dkdv_range(dk, dv, k, v, q_ref, do_ref, lse_base, delta_base, dq_base, stride_qs, stride_ds,
                                 stride_dqas, start_n, tl.minimum(start_n + BLOCK_N, seqlen_q), offs_n, seqlen_q,
                                 qk_scale, sm_scale, True, USE_TMA, ATOMIC_DQ, BLOCK_M, HEAD_DIM)  # fmt: skip
            dk, dv = _dkdv_range(dk, dv, k, v, q_ref, do_ref, lse_base, delta_base, dq_base, stride_qs, stride_ds,
                                 stride_dqas, start_n + BLOCK_N, seqlen_q, offs_n, seqlen_q, qk_scale, sm_scale, False,
                                 USE_TMA, ATOMIC_DQ, BLOCK_M, HEAD_DIM)  # fmt: skip
        else:
            dk, dv = _dkdv_range(dk, dv, k, v, q_ref, do_ref, lse_base, delta_base, dq_base, stride_qs, stride_ds,
                                 stride_dqas, 0, seqlen_q, offs_n, seqlen_q, qk_scale, sm_scale, False, USE_TMA,
                                 ATOMIC_DQ, BLOCK_M, HEAD_DIM)  # fmt: skip
    dk = dk * sm_scale
    tl.store(DK + b64 * stride_dkb + hk64 * stride_dkh + kv_row * stride_dks + offs_d[None, :],
             dk.to(DK.dtype.element_ty), mask=col_ok)  # fmt: skip
    tl.store(DV + b64 * stride_dvb + hk64 * stride_dvh + kv_row * stride_dvs + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=col_ok)  # fmt: skip


@triton.jit
def _dq_range(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, lo, hi, offs_m, seqlen_k, qk_scale,
              MASK: tl.constexpr, BOUNDS: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
    """Key blocks ``[lo, hi)`` into one query block's dQ. ``MASK``: the diagonal; ``BOUNDS``: keys past the end."""
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        if BOUNDS:
            k = tl.load(k_base + offs_n[:, None] * stride_ks + offs_d[None, :], mask=(offs_n < seqlen_k)[:, None],
                        other=0.0)  # fmt: skip
            v = tl.load(v_base + offs_n[:, None] * stride_vs + offs_d[None, :], mask=(offs_n < seqlen_k)[:, None],
                        other=0.0)  # fmt: skip
        else:
            k = tl.load(k_base + offs_n[:, None] * stride_ks + offs_d[None, :])
            v = tl.load(v_base + offs_n[:, None] * stride_vs + offs_d[None, :])
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])
        if MASK:
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        if BOUNDS:
            p = tl.where((offs_n < seqlen_k)[None, :], p, 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    return dq


@triton.jit
def attention_bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, CU,
                            stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                            stride_vb, stride_vh, stride_vs, stride_db, stride_dh, stride_ds,
                            stride_dqb, stride_dqh, stride_dqs, stride_lb, stride_lh,
                            seqlen_q, seqlen_k, qk_scale, sm_scale, HEADS_Q,
                            GROUP, CAUSAL: tl.constexpr, VARLEN: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):  # fmt: skip
    """Grid ``(cdiv(seqlen_q, BLOCK_M), batch * HEADS_Q)``; causal needs ``BLOCK_M % BLOCK_N == 0``."""
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
    b64 = b.to(tl.int64)
    h64 = h.to(tl.int64)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seqlen_q
    q_row = start64 + offs_m[:, None]
    q = tl.load(Q + b64 * stride_qb + h64 * stride_qh + q_row * stride_qs + offs_d[None, :], mask=row_ok[:, None],
                other=0.0)  # fmt: skip
    do = tl.load(DO + b64 * stride_db + h64 * stride_dh + q_row * stride_ds + offs_d[None, :], mask=row_ok[:, None],
                 other=0.0)  # fmt: skip
    lse = tl.load(LSE + b64 * stride_lb + h64 * stride_lh + start64 + offs_m, mask=row_ok, other=float("inf"))
    delta = tl.load(DELTA + b64 * stride_lb + h64 * stride_lh + start64 + offs_m, mask=row_ok, other=0.0)
    k_base = K + b64 * stride_kb + hk.to(tl.int64) * stride_kh + start64 * stride_ks
    v_base = V + b64 * stride_vb + hk.to(tl.int64) * stride_vh + start64 * stride_vs
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    if CAUSAL:
        dq = _dq_range(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, 0, start_m, offs_m, seqlen_k,
                       qk_scale, False, False, BLOCK_N, HEAD_DIM)  # fmt: skip
        dq = _dq_range(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, start_m,
                       tl.minimum(start_m + BLOCK_M, seqlen_k), offs_m, seqlen_k, qk_scale, True, True, BLOCK_N,
                       HEAD_DIM)  # fmt: skip
    else:
        full = (seqlen_k // BLOCK_N) * BLOCK_N
        dq = _dq_range(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, 0, full, offs_m, seqlen_k,
                       qk_scale, False, False, BLOCK_N, HEAD_DIM)  # fmt: skip
        dq = _dq_range(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, full, seqlen_k, offs_m, seqlen_k,
                       qk_scale, False, True, BLOCK_N, HEAD_DIM)  # fmt: skip
    dq = dq * sm_scale
    dq_ptrs = DQ + b64 * stride_dqb + h64 * stride_dqh + q_row * stride_dqs + offs_d[None, :]
    tl.store(dq_ptrs, dq.to(DQ.dtype.element_ty), mask=row_ok[:, None])


def backward(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    geo: Geometry,
    causal: bool,
    scale: float,
    cu_seqlens: torch.Tensor | None,
    config: dict,
    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the three backward kernels with ``config`` (``dkdv``/``dq``: ``block_m``, ``block_n``,
    ``num_warps``, ``num_stages``; ``dkdv.tma``; ``dq.atomic``: dQ added by the dK/dV kernel with fp32 atomics
    instead of the dQ kernel; ``delta_block``); returns ``(dq, dk, dv)`` shaped and strided like ``q, k, v``
    (or the ``grads`` given, which must be; varlen ones are not zeroed first)."""
    if do.stride(-1) != 1:
        do = do.contiguous()
    if grads is None:
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        if geo.varlen:  # tokens past cu_seqlens[-1] belong to no sequence: their gradients are zero
            dq.zero_(), dk.zero_(), dv.zero_()
    else:
        dq, dk, dv = grads
    if geo.seqlen_q == 0 or geo.batch == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    delta = torch.empty_like(lse)
    cu = cu_seqlens if cu_seqlens is not None else lse  # unread when dense
    lse_strides = geo.lse_strides()
    db = int(config["delta_block"])
    attention_bwd_delta_kernel[(triton.cdiv(geo.seqlen_q, db), geo.batch * geo.heads_q)](
        out, do, delta, cu, *geo.strides(out), *geo.strides(do), *lse_strides, geo.seqlen_q, geo.heads_q,
        VARLEN=geo.varlen, BLOCK_M=db, HEAD_DIM=geo.head_dim,
    )  # fmt: skip
    common = (*geo.strides(q), *geo.strides(k), *geo.strides(v), *geo.strides(do))
    c = config["dkdv"]
    use_tma = bool(c.get("tma", False))
    if use_tma:
        use_descriptor_scratch()
    if causal and c["block_n"] % c["block_m"]:
        raise ValueError(f"causal dK/dV needs block_n a multiple of block_m, got {c['block_n']} and {c['block_m']}")
    atomic = bool(config["dq"].get("atomic", False))
    dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device) if atomic else lse
    dq_acc_strides = geo.strides(dq_acc) if atomic else (0, 0, 0)
    attention_bwd_dkdv_kernel[(triton.cdiv(geo.seqlen_k, c["block_n"]), geo.batch * geo.heads_kv)](
        q, k, v, do, lse, delta, dk, dv, cu, *common, *geo.strides(dk), *geo.strides(dv), *lse_strides,
        dq_acc, *dq_acc_strides, geo.seqlen_q, geo.seqlen_k, scale * LOG2E, scale, geo.heads_kv, GROUP=geo.group,
        CAUSAL=causal, VARLEN=geo.varlen, USE_TMA=use_tma, ATOMIC_DQ=atomic, BLOCK_M=c["block_m"],
        BLOCK_N=c["block_n"], HEAD_DIM=geo.head_dim, num_warps=c["num_warps"], num_stages=c["num_stages"],
    )  # fmt: skip
    if atomic:
        return dq.copy_(dq_acc), dk, dv
    c = config["dq"]
    if causal and c["block_m"] % c["block_n"]:
        raise ValueError(f"causal dQ needs block_m a multiple of block_n, got {c['block_m']} and {c['block_n']}")
    attention_bwd_dq_kernel[(triton.cdiv(geo.seqlen_q, c["block_m"]), geo.batch * geo.heads_q)](
        q, k, v, do, lse, delta, dq, cu, *common, *geo.strides(dq), *lse_strides, geo.seqlen_q, geo.seqlen_k,
        scale * LOG2E, scale, geo.heads_q, GROUP=geo.group, CAUSAL=causal, VARLEN=geo.varlen,
        BLOCK_M=c["block_m"], BLOCK_N=c["block_n"], HEAD_DIM=geo.head_dim, num_warps=c["num_warps"],
        num_stages=c["num_stages"],
    )  # fmt: skip
    return dq, dk, dv
