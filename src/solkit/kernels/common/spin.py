"""Tagged words and a bounded spin wait: the row barrier of the split-row kernels (cross-entropy, softmax).

Why. A split-row kernel cuts each row into ``SPLIT`` chunks held in the registers of ``SPLIT`` programs (a
"group") that must exchange per-chunk statistics (max, sum, ...) before they can finish the row, so the row
is read from DRAM once. The exchange is a barrier of the group, and it must be cheap: a counter with a release
fence also waits for the program's prefetch loads in flight, and a wait that can hang is not allowed.

Protocol. Arrival ``j`` is a group's ``j``-th synchronised row.

* Writer: each program publishes each value of arrival ``j`` as one 64-bit word ``(j + 1) << 32 | fp32 bits``
  in its lane of the arrival's slot, by a relaxed atomic exchange (:func:`publish_tagged`). The tag says
  which arrival the word holds, so there is no counter and no fence; slots rotate with ``j`` (the caller
  picks the slot and zeroes the buffer once per call).
* Readers: load the group's ``SPLIT_P2`` lanes (volatile; :func:`poll_tagged` for up to three values per
  lane, lanes past ``SPLIT`` read as matching tags holding -inf for a max and 0 for a sum) and re-read until
  every tag reads ``j + 1`` (:func:`spin_until_tagged`).
* Bounded: the re-reads stop after ``spin_budget`` polls and report ``ready = 0``. The caller then falls back
  (writes NaN and sets a flag, or recomputes the row's statistics from the whole row itself) and never waits
  again: a peer that is not resident (too large a grid) or never arrives gives a visible failure, never a hang.
  Under Triton's CPU interpreter programs run one after another, so a group of several never meets: only the
  fallback can succeed there.

A reader polls once before its own work (the loads then overlap it) and passes that first read in, so the
wait costs no extra round trip when the peers are already there.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def tagged(value, tag):
    """The word of an fp32 ``value`` under ``tag`` (``(j + 1) << 32``)."""
    return tag | (value.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)


@triton.jit
def untag(words):
    """The fp32 values of tagged words."""
    return (words & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def tags_match(wm, ws, wz, want):
    """1 if every lane of the three word vectors carries tag ``want`` (= j + 1), else 0 (a vector passed twice
    costs nothing: the compare is shared)."""
    ok = ((wm >> 32) == want) & ((ws >> 32) == want) & ((wz >> 32) == want)
    return tl.min(ok.to(tl.int32), axis=0)


@triton.jit
def _load_words(base, offs, pm, tag, m_pad, SPLIT_P2: tl.constexpr, HAS_SMOOTHING: tl.constexpr):
    wm = tl.load(base + offs, mask=pm, other=m_pad, volatile=True)
    ws = tl.load(base + SPLIT_P2 + offs, mask=pm, other=tag, volatile=True)
    wz = ws
    if HAS_SMOOTHING:
        wz = tl.load(base + 2 * SPLIT_P2 + offs, mask=pm, other=tag, volatile=True)
    return wm, ws, wz


@triton.jit
def publish_tagged(base, chunk, k, m_c, s_c, sz, SPLIT_P2: tl.constexpr, HAS_SMOOTHING: tl.constexpr):
    """Publish arrival ``k``'s ``(max, sum, sum z)`` of this chunk: lane ``chunk`` of the slot's ``[3, SPLIT_P2]``
    words at ``base``, one relaxed atomic exchange each (``sum z`` only with ``HAS_SMOOTHING``)."""
    tag = tl.cast(k + 1, tl.int64) << 32
    tl.atomic_xchg(base + chunk, tagged(m_c, tag), sem="relaxed")
    tl.atomic_xchg(base + SPLIT_P2 + chunk, tagged(s_c, tag), sem="relaxed")
    if HAS_SMOOTHING:
        tl.atomic_xchg(base + 2 * SPLIT_P2 + chunk, tagged(sz, tag), sem="relaxed")


@triton.jit
def poll_tagged(base, k, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, HAS_SMOOTHING: tl.constexpr):
    """One read of the group's words of arrival ``k``: ``(max words, sum words, sum-z words)`` (the sum words
    twice without ``HAS_SMOOTHING``); lanes past SPLIT read as matching tags with -inf for the max and 0 for the
    sums."""
    tag = tl.cast(k + 1, tl.int64) << 32
    offs = tl.arange(0, SPLIT_P2)
    return _load_words(base, offs, offs < SPLIT, tag, tag | 0xFF800000, SPLIT_P2, HAS_SMOOTHING)


@triton.jit
def poll_words(base, k, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr, WORDS: tl.constexpr):
    """One read of ``WORDS`` words per lane, returned as three vectors (repeated when fewer): 1, one sum per
    lane (padding 0); 2, ``(max, sum)``; 3, ``(max, sum, sum z)`` (:func:`poll_tagged`)."""
    if WORDS == 1:
        tag = tl.cast(k + 1, tl.int64) << 32
        offs = tl.arange(0, SPLIT_P2)
        w = tl.load(base + offs, mask=offs < SPLIT, other=tag, volatile=True)
        return w, w, w
    else:
        return poll_tagged(base, k, SPLIT, SPLIT_P2, WORDS == 3)


@triton.jit
def spin_until_tagged(base, k, w0, w1, w2, spin_budget, SPLIT: tl.constexpr, SPLIT_P2: tl.constexpr,
                       WORDS: tl.constexpr):  # fmt: skip
    """From a first read ``(w0, w1, w2)`` (of :func:`poll_words` with the same ``WORDS``), re-read the group's
    words of arrival ``k`` until every tag matches, at most ``spin_budget`` times. Returns the last read and
    ``ready`` (1 if every peer arrived, 0 if the budget ran out: the caller's fallback)."""
    want = tl.cast(k + 1, tl.int64)
    ready = tags_match(w0, w1, w2, want)
    spins = 0
    while (ready == 0) & (spins < spin_budget):
        w0, w1, w2 = poll_words(base, k, SPLIT, SPLIT_P2, WORDS)
        ready = tags_match(w0, w1, w2, want)
        spins += 1
    return w0, w1, w2, ready
