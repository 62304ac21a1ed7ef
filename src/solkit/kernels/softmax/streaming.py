"""Streaming row reductions shared by the softmax kernels: a row range read chunk by chunk, for the paths whose
rows (or fallbacks) do not fit in registers.

* :func:`online_max_sum`: ``(max, sum(exp(x - max)))`` with a running max (a scalar, one block reduction per
  chunk) and per-lane sums rescaled by it (``s <- s * exp(m_old - m_new) + exp(x - m_new)``, one exp per element);
* :func:`dot_range`: ``sum(y * dy)``, the backward's row statistic.

``PREFETCH``: the next chunk is loaded before the current one is reduced (a register double buffer).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def online_max_sum(row_ptr, c0, c1, CHUNK: tl.constexpr, POLICY: tl.constexpr, PREFETCH: tl.constexpr):
    """``(max, sum(exp(x - max)))`` of ``row_ptr[c0:c1]``, chunk by chunk: a running max (a scalar, one
    block reduction per chunk) and per-lane sums rescaled by it. ``PREFETCH``: the next chunk is
    loaded before the current one is reduced (a register double buffer)."""
    cols = tl.arange(0, CHUNK)
    neg_inf = -float("inf")
    m_run = tl.max(tl.full([CHUNK], neg_inf, tl.float32), axis=0)
    s_vec = tl.zeros([CHUNK], tl.float32)
    if PREFETCH:
        x_next = tl.load(row_ptr + c0 + cols, mask=c0 + cols < c1, other=neg_inf, eviction_policy=POLICY)
    for start in range(c0, c1, CHUNK):
        if PREFETCH:
            x = x_next.to(tl.float32)
            nxt = start + CHUNK + cols
            x_next = tl.load(row_ptr + nxt, mask=nxt < c1, other=neg_inf, eviction_policy=POLICY)
        else:
            x = tl.load(row_ptr + start + cols, mask=start + cols < c1, other=neg_inf, eviction_policy=POLICY)
            x = x.to(tl.float32)
        m_new = tl.maximum(m_run, tl.max(x, axis=0))
        m_safe = tl.where(m_new == neg_inf, 0.0, m_new)  # an all -inf prefix must not make NaN
        s_vec = s_vec * tl.exp(m_run - m_safe) + tl.exp(x - m_safe)
        m_run = m_new
    return m_run, tl.sum(s_vec, axis=0)


@triton.jit
def dot_range(y_row, dy_row, c0, c1, CHUNK: tl.constexpr, POLICY: tl.constexpr, PREFETCH: tl.constexpr):
    """``sum(y * dy)`` over ``[c0, c1)``; ``PREFETCH``: the next chunk loaded before the current one is used."""
    cols = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], tl.float32)
    if PREFETCH:
        y_next = tl.load(y_row + c0 + cols, mask=c0 + cols < c1, other=0.0, eviction_policy=POLICY)
        dy_next = tl.load(dy_row + c0 + cols, mask=c0 + cols < c1, other=0.0, eviction_policy=POLICY)
    for start in range(c0, c1, CHUNK):
        if PREFETCH:
            y, dy = y_next.to(tl.float32), dy_next.to(tl.float32)
            nxt = start + CHUNK + cols
            y_next = tl.load(y_row + nxt, mask=nxt < c1, other=0.0, eviction_policy=POLICY)
            dy_next = tl.load(dy_row + nxt, mask=nxt < c1, other=0.0, eviction_policy=POLICY)
        else:
            mask = start + cols < c1
            y = tl.load(y_row + start + cols, mask=mask, other=0.0, eviction_policy=POLICY).to(tl.float32)
            dy = tl.load(dy_row + start + cols, mask=mask, other=0.0, eviction_policy=POLICY).to(tl.float32)
        acc += y * dy
    return tl.sum(acc, axis=0)
