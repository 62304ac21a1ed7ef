"""Rotary position embedding (RoPE) on q and k in one launch, forward and backward.

Math. Each head vector ``x`` (length ``D``, even) is split into pairs ``(x1[i], x2[i])``, ``i < D/2``:

* half-split layout (Llama, GPT-NeoX, HF ``rotate_half``): ``x1 = x[:D/2]``, ``x2 = x[D/2:]``;
* interleaved layout (GPT-J, Flux): ``x1 = x[0::2]``, ``x2 = x[1::2]``.

With ``cos``/``sin`` of length ``D`` in the same layout as ``x`` (``c1, c2, s1, s2`` are their halves
taken the same way), the forward is exactly HF's ``x * cos + rotate(x) * sin``:

    y1 = x1 * c1 - x2 * s1
    y2 = x2 * c2 + x1 * s2

and the backward is its transpose:

    dx1 = dy1 * c1 + dy2 * s2
    dx2 = dy2 * c2 - dy1 * s1

(for the usual tables, ``c1 == c2`` and ``s1 == s2``, so the backward is the rotation by ``-theta``).

Accepted layouts. ``q`` is ``[batch, seq, q_heads, D]`` and ``k`` is ``[batch, seq, k_heads, D]``
(``layout="bshd"``, default), or ``[batch, heads, seq, D]`` (``layout="bhsd"``). Any strides are
accepted as long as the last dimension is contiguous (views of a fused qkv projection need no copy);
q and k may have different head counts (GQA/MQA). ``cos``/``sin`` are ``[seq, D]``, ``[1, seq, D]``,
``[batch, seq, D]`` (a size-1 head axis, as HF's ``unsqueeze``, is also accepted), or, with
``position_ids`` (``[seq]`` or ``[batch, seq]`` integers), a table ``[max_pos, D]`` indexed by them.
Outputs are new tensors (the inputs are not modified); math in fp32.

Bytes per call (``b`` bytes per element of q/k, ``bc`` of cos/sin, ``T = batch * seq`` tokens):

* forward:  read ``b·T·D·(Hq + Hk)``, write the same, plus ``2·bc·T·D`` of cos/sin
  (``2·bc·seq·D`` when the table is shared across the batch; it stays in L2);
* backward: the same as the forward (dq, dk in; dq, dk out; cos/sin).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from solkit.errors import SolkitError
from solkit.kernels.common import tuned
from solkit.kernels.common.capability import allowed, device_caps
from solkit.kernels.rope.paths import PATHS

LAYOUTS = ("bshd", "bhsd")
#: Launch defaults. One program takes ``BLOCK_T`` whole tokens (all their q and k heads) when one
#: token's heads (q and k head counts each padded to a power of two, times ``head_dim``) fit in
#: ``max_tile`` elements: at most ``tokens`` tokens, as many as fit (``tile`` = 0: one token per
#: program). Wider tokens are cut into head chunks along a second grid axis, each program taking
#: ``max_tile`` elements' worth of q heads and the same share of k heads. ``num_warps`` per program;
#: an optional ``maxnreg`` caps registers per thread (more programs resident per SM).
#: Values: rope/configs.yaml ``rope`` (the defaults) and ``rope_shapes``.
ROPE_CONFIG = tuned.load("rope", "rope")
#: Per-shape overrides of :data:`ROPE_CONFIG`, by the elements of one token's (padded) q and k heads:
#: the first entry whose ``max_token_elems`` is at least the shape's wins; none matching: the defaults.
ROPE_SHAPE_CONFIG = tuned.load("rope", "rope_shapes")["shapes"]


def rope_config(n_q: int, n_k: int, dim: int) -> dict:
    """The launch settings for a head layout: :data:`ROPE_CONFIG` with the matching shape override."""
    elems = (triton.next_power_of_2(n_q) + triton.next_power_of_2(n_k)) * dim
    for entry in ROPE_SHAPE_CONFIG:
        if elems <= entry["max_token_elems"]:
            return {**ROPE_CONFIG, **{k: v for k, v in entry.items() if k != "max_token_elems"}}
    return dict(ROPE_CONFIG)


def rope_plan(n_q: int, n_k: int, dim: int, cfg: dict) -> tuple[int, int, int, int]:
    """``(BLOCK_T, BLOCK_HQ, BLOCK_HK, chunks)``: tokens per program, q and k heads per program, and
    head chunks per token (the second grid axis) for at most ``cfg["max_tile"]`` elements a program."""
    heads_q, heads_k = triton.next_power_of_2(n_q), triton.next_power_of_2(n_k)
    per_token = (heads_q + heads_k) * dim
    max_tile = max(int(cfg["max_tile"]), 2 * dim)
    if per_token <= max_tile:
        fit = max(1, min(int(cfg.get("tokens", 1)) if cfg.get("tile", 1) else 1, max_tile // per_token))
        return 1 << (fit.bit_length() - 1), heads_q, heads_k, 1  # a power of two (tl.arange), at most ``fit``
    split = triton.next_power_of_2(triton.cdiv(per_token, max_tile))
    block_hq, block_hk = max(heads_q // split, 1), max(heads_k // split, 1)
    return 1, block_hq, block_hk, max(triton.cdiv(n_q, block_hq), triton.cdiv(n_k, block_hk))


@triton.jit
def _tile_rows(ptr, t_off, heads, n_heads, head_stride, tmask):
    """[T, H, 1] pointers of the heads of T tokens, and their mask."""
    rows = ptr + t_off[:, None, None] + heads[None, :, None].to(tl.int64) * head_stride
    return rows, tmask[:, None, None] & (heads[None, :, None] < n_heads)


@triton.jit
def _load_pairs(rows, mask, HALF: tl.constexpr, INTERLEAVED: tl.constexpr):
    """The pair halves ``(x1, x2)`` of [T, H, 1] head rows, as [T, H, HALF] tiles in their own dtype:
    one contiguous load of the whole head split on chip when interleaved, two half loads otherwise."""
    d = tl.arange(0, HALF)[None, None, :]
    if INTERLEAVED:
        x = tl.load(rows + tl.arange(0, 2 * HALF)[None, None, :], mask=mask, other=0.0)
        x1, x2 = tl.split(tl.reshape(x, (x.shape[0], x.shape[1], HALF, 2)))
    else:
        x1 = tl.load(rows + d, mask=mask, other=0.0)
        x2 = tl.load(rows + HALF + d, mask=mask, other=0.0)
    return x1, x2


@triton.jit
def _store_rotated(rows, mask, x1, x2, c1, c2, s1, s2, HALF: tl.constexpr, INTERLEAVED: tl.constexpr,
                   BACKWARD: tl.constexpr):  # fmt: skip
    """Rotate the pairs in fp32 (``BACKWARD``: the transposed rotation) and store them to ``rows``."""
    x1 = x1.to(tl.float32)
    x2 = x2.to(tl.float32)
    if BACKWARD:
        y1 = x1 * c1 + x2 * s2
        y2 = x2 * c2 - x1 * s1
    else:
        y1 = x1 * c1 - x2 * s1
        y2 = x2 * c2 + x1 * s2
    y1 = y1.to(rows.dtype.element_ty)
    y2 = y2.to(rows.dtype.element_ty)
    if INTERLEAVED:
        y = tl.reshape(tl.join(y1, y2), (y1.shape[0], y1.shape[1], 2 * HALF))
        tl.store(rows + tl.arange(0, 2 * HALF)[None, None, :], y, mask=mask)
    else:
        d = tl.arange(0, HALF)[None, None, :]
        tl.store(rows + d, y1, mask=mask)
        tl.store(rows + HALF + d, y2, mask=mask)


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, q_out_ptr, k_out_ptr, cos_ptr, sin_ptr, pos_ptr,
    n_tokens, seq_len, n_q_heads, n_k_heads,
    q_sb, q_ss, q_sh, k_sb, k_ss, k_sh,
    qo_sb, qo_ss, qo_sh, ko_sb, ko_ss, ko_sh,
    cos_sb, cos_ss, sin_sb, sin_ss, pos_sb, pos_ss,
    HALF: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
    INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, HAS_POS: tl.constexpr,
):  # fmt: skip
    """Program (i, j): tokens ``i*BLOCK_T ...`` and head chunk ``j`` (q heads ``j*BLOCK_HQ ...``, k heads
    ``j*BLOCK_HK ...``) as [T, H, D/2] tiles. Every load (q, k, the tables) is issued before the first
    store, so a program keeps its whole tile in flight (Llama-3-8B: 10 KB per token) rather than one
    head at a time."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    chunk = tl.program_id(1)
    tmask = t < n_tokens
    b = (t // seq_len).to(tl.int64)
    s = (t % seq_len).to(tl.int64)
    if HAS_POS:
        row = tl.load(pos_ptr + b * pos_sb + s * pos_ss, mask=tmask, other=0).to(tl.int64)
        c_base = row * cos_ss
        s_base = row * sin_ss
    else:
        c_base = b * cos_sb + s * cos_ss
        s_base = b * sin_sb + s * sin_ss
    q_heads = chunk * BLOCK_HQ + tl.arange(0, BLOCK_HQ)
    k_heads = chunk * BLOCK_HK + tl.arange(0, BLOCK_HK)
    q_rows, q_mask = _tile_rows(q_ptr, b * q_sb + s * q_ss, q_heads, n_q_heads, q_sh, tmask)
    k_rows, k_mask = _tile_rows(k_ptr, b * k_sb + s * k_ss, k_heads, n_k_heads, k_sh, tmask)
    q1, q2 = _load_pairs(q_rows, q_mask, HALF, INTERLEAVED)
    k1, k2 = _load_pairs(k_rows, k_mask, HALF, INTERLEAVED)
    c_rows = cos_ptr + c_base[:, None, None] + tl.zeros([1, 1, 1], dtype=tl.int64)
    s_rows = sin_ptr + s_base[:, None, None] + tl.zeros([1, 1, 1], dtype=tl.int64)
    c1, c2 = _load_pairs(c_rows, tmask[:, None, None], HALF, INTERLEAVED)
    s1, s2 = _load_pairs(s_rows, tmask[:, None, None], HALF, INTERLEAVED)
    c1, c2, s1, s2 = c1.to(tl.float32), c2.to(tl.float32), s1.to(tl.float32), s2.to(tl.float32)
    qo_rows, _ = _tile_rows(q_out_ptr, b * qo_sb + s * qo_ss, q_heads, n_q_heads, qo_sh, tmask)
    ko_rows, _ = _tile_rows(k_out_ptr, b * ko_sb + s * ko_ss, k_heads, n_k_heads, ko_sh, tmask)
    _store_rotated(qo_rows, q_mask, q1, q2, c1, c2, s1, s2, HALF, INTERLEAVED, BACKWARD)
    _store_rotated(ko_rows, k_mask, k1, k2, c1, c2, s1, s2, HALF, INTERLEAVED, BACKWARD)


def _to_bshd(x: torch.Tensor, layout: str, name: str) -> torch.Tensor:
    if x.dim() != 4:
        raise SolkitError(f"rope: {name} must be 4-D ({layout}), got shape {tuple(x.shape)}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise SolkitError(f"rope: {name} dtype must be fp16, bf16 or fp32, got {x.dtype}")
    if x.stride(-1) != 1:
        x = x.contiguous()
    return x.transpose(1, 2) if layout == "bhsd" else x


def _table_view(t: torch.Tensor, batch: int, seq: int, dim: int, has_pos: bool, name: str) -> tuple:
    """Return (tensor, batch_stride, seq_stride) addressing cos/sin rows; batch stride 0 = broadcast."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    if t.dim() == 4:  # HF's unsqueezed head axis: [B, 1, S, D] or [B, S, 1, D]
        if t.shape[1] == 1 and t.shape[2] == seq:
            t = t[:, 0]
        elif t.shape[2] == 1:
            t = t[:, :, 0]
    if t.shape[-1] != dim:
        raise SolkitError(f"rope: {name} last dim must equal head_dim {dim}, got {tuple(t.shape)}")
    if has_pos:
        if t.dim() != 2:
            raise SolkitError(f"rope: with position_ids, {name} must be a [max_pos, {dim}] table, got {tuple(t.shape)}")
        return t, 0, t.stride(0)
    if t.dim() == 2 and t.shape[0] == seq:
        return t, 0, t.stride(0)
    if t.dim() == 3 and t.shape[1] == seq and t.shape[0] in (1, batch):
        return t, (t.stride(0) if t.shape[0] == batch and batch > 1 else 0), t.stride(1)
    raise SolkitError(
        f"rope: {name} must be [seq, D], [1, seq, D] or [batch, seq, D] (seq={seq}), got {tuple(t.shape)}"
    )


def _rope_launch(q, k, cos, sin, position_ids, interleaved: bool, layout: str, backward: bool, config=None):
    if layout not in LAYOUTS:
        raise SolkitError(f"rope: layout must be one of {LAYOUTS}, got {layout!r}")
    kernel = "rope_bwd" if backward else "rope_fwd"
    allowed(PATHS[kernel], device_caps(q), kernel)  # one portable path: raises only where nothing runs
    qv, kv = _to_bshd(q, layout, "q"), _to_bshd(k, layout, "k")
    batch, seq, n_q, dim = qv.shape
    if kv.shape[0] != batch or kv.shape[1] != seq or kv.shape[3] != dim:
        raise SolkitError(f"rope: q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch, seq or head_dim")
    if dim % 2 or dim & (dim - 1):
        raise SolkitError(f"rope: head_dim must be an even power of two, got {dim}")
    n_k = kv.shape[2]
    has_pos = position_ids is not None
    cos_t, cos_sb, cos_ss = _table_view(cos, batch, seq, dim, has_pos, "cos")
    sin_t, sin_sb, sin_ss = _table_view(sin, batch, seq, dim, has_pos, "sin")
    if has_pos:
        pos = position_ids
        if pos.dim() == 1:
            pos = pos.view(1, -1).expand(batch, -1)
        if tuple(pos.shape) != (batch, seq) and not (pos.shape[0] == 1 and pos.shape[1] == seq):
            raise SolkitError(f"rope: position_ids must be [seq] or [batch, seq], got {tuple(position_ids.shape)}")
        pos_sb = pos.stride(0) if pos.shape[0] == batch and batch > 1 else 0
        pos_ss = pos.stride(1)
    else:
        pos, pos_sb, pos_ss = cos_t, 0, 0  # unused pointer
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    qo, ko = _to_bshd(q_out, layout, "q"), _to_bshd(k_out, layout, "k")
    if batch * seq:
        cfg = rope_config(n_q, n_k, dim) if config is None else {**rope_config(n_q, n_k, dim), **config}
        block_t, block_hq, block_hk, chunks = rope_plan(n_q, n_k, dim, cfg)
        strides = (
            qv.stride(0), qv.stride(1), qv.stride(2), kv.stride(0), kv.stride(1), kv.stride(2),
            qo.stride(0), qo.stride(1), qo.stride(2), ko.stride(0), ko.stride(1), ko.stride(2),
            cos_sb, cos_ss, sin_sb, sin_ss, pos_sb, pos_ss,
        )  # fmt: skip
        _rope_kernel[(triton.cdiv(batch * seq, block_t), chunks)](
            qv, kv, qo, ko, cos_t, sin_t, pos, batch * seq, seq, n_q, n_k, *strides,
            HALF=dim // 2, BLOCK_T=block_t, BLOCK_HQ=block_hq, BLOCK_HK=block_hk,
            INTERLEAVED=interleaved, BACKWARD=backward, HAS_POS=has_pos, num_warps=int(cfg["num_warps"]),
            maxnreg=cfg.get("maxnreg"),
        )  # fmt: skip
    return q_out, k_out


def rope_forward(
    q, k, cos, sin, position_ids=None, *, interleaved: bool = False, layout: str = "bshd", config: dict | None = None
):
    """Rotate q and k (one launch); returns new ``(q_rot, k_rot)`` in the input layout. ``config``:
    launch settings overriding :func:`rope_config`'s (keys of :data:`ROPE_CONFIG`)."""
    return _rope_launch(q, k, cos, sin, position_ids, interleaved, layout, False, config)


def rope_backward(
    dq, dk, cos, sin, position_ids=None, *, interleaved: bool = False, layout: str = "bshd", config: dict | None = None
):
    """Gradients of :func:`rope_forward` w.r.t. q and k (the transposed rotation), one launch."""
    return _rope_launch(dq, dk, cos, sin, position_ids, interleaved, layout, True, config)


def rope_bytes(batch: int, seq: int, n_q: int, n_k: int, dim: int, dtype: torch.dtype, table_dtype=None,
               table_per_batch: bool = False, backward: bool = False) -> int:  # fmt: skip
    """Minimum bytes of one forward (x2 with ``backward``) call: q/k read + written, cos/sin read once."""
    elem = torch.empty((), dtype=dtype).element_size()
    telem = torch.empty((), dtype=table_dtype or dtype).element_size()
    qk = 2 * elem * batch * seq * dim * (n_q + n_k)
    table = 2 * telem * (batch if table_per_batch else 1) * seq * dim
    return (qk + table) * (2 if backward else 1)
