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

_LAYOUTS = ("bshd", "bhsd")
#: Launch settings. tile = 1: the tile kernel, ``tokens`` whole tokens per program (all q and k heads
#: loaded before any store), used when one token's heads fit in ``max_tile`` elements; tile = 0: the
#: per-token kernel, head tiles of at most ``max_tile`` elements one after another, ``tokens`` tokens
#: per program (unrolled). ``num_warps`` per program.
#: Default: the fastest correct candidate on an H200 at Llama-3-8B shapes (kernels_gates_round3a.json): the tile
#: kernel, one token (32 q + 8 k heads) per program, 8 warps.
ROPE_CONFIG = {"num_warps": 8, "max_tile": 8192, "tokens": 1, "tile": 1}


@triton.jit
def _rotate_heads(
    x_ptr, y_ptr, x_base, y_base, x_head_stride, y_head_stride, n_heads,
    c1, c2, s1, s2, half_offs,
    HALF: tl.constexpr, BLOCK_H: tl.constexpr, INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr,
):  # fmt: skip
    for h0 in range(0, n_heads, BLOCK_H):
        heads = h0 + tl.arange(0, BLOCK_H)
        hmask = heads[:, None] < n_heads
        x_rows = x_ptr + x_base + heads[:, None].to(tl.int64) * x_head_stride
        y_rows = y_ptr + y_base + heads[:, None].to(tl.int64) * y_head_stride
        if INTERLEAVED:
            # One contiguous load of the whole head, split into (even, odd) lanes on chip.
            full = tl.arange(0, 2 * HALF)[None, :]
            x = tl.load(x_rows + full, mask=hmask, other=0.0).to(tl.float32)
            x1, x2 = tl.split(tl.reshape(x, (BLOCK_H, HALF, 2)))
        else:
            x1 = tl.load(x_rows + half_offs[None, :], mask=hmask, other=0.0).to(tl.float32)
            x2 = tl.load(x_rows + HALF + half_offs[None, :], mask=hmask, other=0.0).to(tl.float32)
        if BACKWARD:
            y1 = x1 * c1[None, :] + x2 * s2[None, :]
            y2 = x2 * c2[None, :] - x1 * s1[None, :]
        else:
            y1 = x1 * c1[None, :] - x2 * s1[None, :]
            y2 = x2 * c2[None, :] + x1 * s2[None, :]
        y1 = y1.to(y_ptr.dtype.element_ty)
        y2 = y2.to(y_ptr.dtype.element_ty)
        if INTERLEAVED:
            y = tl.reshape(tl.join(y1, y2), (BLOCK_H, 2 * HALF))
            tl.store(y_rows + tl.arange(0, 2 * HALF)[None, :], y, mask=hmask)
        else:
            tl.store(y_rows + half_offs[None, :], y1, mask=hmask)
            tl.store(y_rows + HALF + half_offs[None, :], y2, mask=hmask)


@triton.jit
def _rope_token(
    token, q_ptr, k_ptr, q_out_ptr, k_out_ptr, cos_ptr, sin_ptr, pos_ptr,
    seq_len, n_q_heads, n_k_heads,
    q_sb, q_ss, q_sh, k_sb, k_ss, k_sh,
    qo_sb, qo_ss, qo_sh, ko_sb, ko_ss, ko_sh,
    cos_sb, cos_ss, sin_sb, sin_ss, pos_sb, pos_ss,
    HALF: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
    INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, HAS_POS: tl.constexpr,
):  # fmt: skip
    b = (token // seq_len).to(tl.int64)
    s = (token % seq_len).to(tl.int64)
    if HAS_POS:
        row = tl.load(pos_ptr + b * pos_sb + s * pos_ss).to(tl.int64)
        c_base = row * cos_ss
        s_base = row * sin_ss
    else:
        c_base = b * cos_sb + s * cos_ss
        s_base = b * sin_sb + s * sin_ss
    half_offs = tl.arange(0, HALF)
    if INTERLEAVED:
        c = tl.load(cos_ptr + c_base + tl.arange(0, 2 * HALF)).to(tl.float32)
        sn = tl.load(sin_ptr + s_base + tl.arange(0, 2 * HALF)).to(tl.float32)
        c1, c2 = tl.split(tl.reshape(c, (HALF, 2)))
        s1, s2 = tl.split(tl.reshape(sn, (HALF, 2)))
    else:
        c1 = tl.load(cos_ptr + c_base + half_offs).to(tl.float32)
        c2 = tl.load(cos_ptr + c_base + HALF + half_offs).to(tl.float32)
        s1 = tl.load(sin_ptr + s_base + half_offs).to(tl.float32)
        s2 = tl.load(sin_ptr + s_base + HALF + half_offs).to(tl.float32)
    _rotate_heads(
        q_ptr, q_out_ptr, b * q_sb + s * q_ss, b * qo_sb + s * qo_ss, q_sh, qo_sh, n_q_heads,
        c1, c2, s1, s2, half_offs, HALF, BLOCK_HQ, INTERLEAVED, BACKWARD,
    )  # fmt: skip
    _rotate_heads(
        k_ptr, k_out_ptr, b * k_sb + s * k_ss, b * ko_sb + s * ko_ss, k_sh, ko_sh, n_k_heads,
        c1, c2, s1, s2, half_offs, HALF, BLOCK_HK, INTERLEAVED, BACKWARD,
    )  # fmt: skip


@triton.jit
def _rope_kernel(
    q_ptr, k_ptr, q_out_ptr, k_out_ptr, cos_ptr, sin_ptr, pos_ptr,
    n_tokens, seq_len, n_q_heads, n_k_heads,
    q_sb, q_ss, q_sh, k_sb, k_ss, k_sh,
    qo_sb, qo_ss, qo_sh, ko_sb, ko_ss, ko_sh,
    cos_sb, cos_ss, sin_sb, sin_ss, pos_sb, pos_ss,
    HALF: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
    INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, HAS_POS: tl.constexpr, TOKENS: tl.constexpr,
):  # fmt: skip
    """TOKENS consecutive tokens per program (unrolled, so their loads can be in flight together)."""
    for i in tl.static_range(TOKENS):
        token = tl.program_id(0) * TOKENS + i
        if token < n_tokens:
            _rope_token(
                token, q_ptr, k_ptr, q_out_ptr, k_out_ptr, cos_ptr, sin_ptr, pos_ptr,
                seq_len, n_q_heads, n_k_heads, q_sb, q_ss, q_sh, k_sb, k_ss, k_sh,
                qo_sb, qo_ss, qo_sh, ko_sb, ko_ss, ko_sh, cos_sb, cos_ss, sin_sb, sin_ss, pos_sb, pos_ss,
                HALF, BLOCK_HQ, BLOCK_HK, INTERLEAVED, BACKWARD, HAS_POS,
            )  # fmt: skip


@triton.jit
def _tile_rows(ptr, t_off, heads, n_heads, head_stride, tmask):
    """[T, H, 1] pointers of the heads of T tokens, and their mask."""
    rows = ptr + t_off[:, None, None] + heads[None, :, None].to(tl.int64) * head_stride
    return rows, tmask[:, None, None] & (heads[None, :, None] < n_heads)


@triton.jit
def _load_pairs(rows, mask, HALF: tl.constexpr, INTERLEAVED: tl.constexpr):
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
def _rope_tile_kernel(
    q_ptr, k_ptr, q_out_ptr, k_out_ptr, cos_ptr, sin_ptr, pos_ptr,
    n_tokens, seq_len, n_q_heads, n_k_heads,
    q_sb, q_ss, q_sh, k_sb, k_ss, k_sh,
    qo_sb, qo_ss, qo_sh, ko_sb, ko_ss, ko_sh,
    cos_sb, cos_ss, sin_sb, sin_ss, pos_sb, pos_ss,
    HALF: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr,
    INTERLEAVED: tl.constexpr, BACKWARD: tl.constexpr, HAS_POS: tl.constexpr,
):  # fmt: skip
    """BLOCK_T tokens per program, all their q and k heads as [T, H, D/2] tiles: every load (q, k, the
    tables) is issued before the first store, so a program keeps ~BLOCK_T x 10 KB in flight (Llama-3-8B)
    instead of one head tile at a time."""
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
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
    q_rows, q_mask = _tile_rows(q_ptr, b * q_sb + s * q_ss, tl.arange(0, BLOCK_HQ), n_q_heads, q_sh, tmask)
    k_rows, k_mask = _tile_rows(k_ptr, b * k_sb + s * k_ss, tl.arange(0, BLOCK_HK), n_k_heads, k_sh, tmask)
    q1, q2 = _load_pairs(q_rows, q_mask, HALF, INTERLEAVED)
    k1, k2 = _load_pairs(k_rows, k_mask, HALF, INTERLEAVED)
    c_rows = cos_ptr + c_base[:, None, None] + tl.zeros([1, 1, 1], dtype=tl.int64)
    s_rows = sin_ptr + s_base[:, None, None] + tl.zeros([1, 1, 1], dtype=tl.int64)
    c1, c2 = _load_pairs(c_rows, tmask[:, None, None], HALF, INTERLEAVED)
    s1, s2 = _load_pairs(s_rows, tmask[:, None, None], HALF, INTERLEAVED)
    c1, c2, s1, s2 = c1.to(tl.float32), c2.to(tl.float32), s1.to(tl.float32), s2.to(tl.float32)
    qo_rows, _ = _tile_rows(q_out_ptr, b * qo_sb + s * qo_ss, tl.arange(0, BLOCK_HQ), n_q_heads, qo_sh, tmask)
    ko_rows, _ = _tile_rows(k_out_ptr, b * ko_sb + s * ko_ss, tl.arange(0, BLOCK_HK), n_k_heads, ko_sh, tmask)
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


def _rope_launch(q, k, cos, sin, position_ids, interleaved: bool, layout: str, backward: bool):
    if layout not in _LAYOUTS:
        raise SolkitError(f"rope: layout must be one of {_LAYOUTS}, got {layout!r}")
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
        half = dim // 2
        tile = ROPE_CONFIG["max_tile"]
        block_hq = max(1, min(triton.next_power_of_2(n_q), max(1, tile // dim)))
        block_hk = max(1, min(triton.next_power_of_2(n_k), max(1, tile // dim)))
        tokens = max(1, int(ROPE_CONFIG.get("tokens", 1)))
        strides = (
            qv.stride(0), qv.stride(1), qv.stride(2), kv.stride(0), kv.stride(1), kv.stride(2),
            qo.stride(0), qo.stride(1), qo.stride(2), ko.stride(0), ko.stride(1), ko.stride(2),
            cos_sb, cos_ss, sin_sb, sin_ss, pos_sb, pos_ss,
        )  # fmt: skip
        heads_q, heads_k = triton.next_power_of_2(n_q), triton.next_power_of_2(n_k)
        if ROPE_CONFIG.get("tile", 0) and (heads_q + heads_k) * dim <= ROPE_CONFIG["max_tile"]:
            # Whole tokens per program; as many as fit in max_tile elements, at most ``tokens``.
            fit = max(1, min(tokens, ROPE_CONFIG["max_tile"] // ((heads_q + heads_k) * dim)))
            block_t = 1 << (fit.bit_length() - 1)  # a power of two (tl.arange), at most ``fit``
            _rope_tile_kernel[(triton.cdiv(batch * seq, block_t),)](
                qv, kv, qo, ko, cos_t, sin_t, pos, batch * seq, seq, n_q, n_k, *strides,
                HALF=half, BLOCK_T=block_t, BLOCK_HQ=heads_q, BLOCK_HK=heads_k,
                INTERLEAVED=interleaved, BACKWARD=backward, HAS_POS=has_pos, num_warps=ROPE_CONFIG["num_warps"],
            )  # fmt: skip
        else:
            _rope_kernel[(triton.cdiv(batch * seq, tokens),)](
                qv, kv, qo, ko, cos_t, sin_t, pos, batch * seq, seq, n_q, n_k, *strides,
                HALF=half, BLOCK_HQ=block_hq, BLOCK_HK=block_hk,
                INTERLEAVED=interleaved, BACKWARD=backward, HAS_POS=has_pos, TOKENS=tokens,
                num_warps=ROPE_CONFIG["num_warps"],
            )  # fmt: skip
    return q_out, k_out


def rope_forward(q, k, cos, sin, position_ids=None, *, interleaved: bool = False, layout: str = "bshd"):
    """Rotate q and k (one launch); returns new ``(q_rot, k_rot)`` in the input layout."""
    return _rope_launch(q, k, cos, sin, position_ids, interleaved, layout, backward=False)


def rope_backward(dq, dk, cos, sin, position_ids=None, *, interleaved: bool = False, layout: str = "bshd"):
    """Gradients of :func:`rope_forward` w.r.t. q and k (the transposed rotation), one launch."""
    return _rope_launch(dq, dk, cos, sin, position_ids, interleaved, layout, backward=True)


class RoPEFunction(torch.autograd.Function):
    """Autograd wrapper; cos/sin/position_ids get no gradient."""

    @staticmethod
    def forward(ctx, q, k, cos, sin, position_ids, interleaved: bool, layout: str):
        ctx.save_for_backward(cos, sin, *(() if position_ids is None else (position_ids,)))
        ctx.has_pos, ctx.interleaved, ctx.layout = position_ids is not None, interleaved, layout
        return rope_forward(q, k, cos, sin, position_ids, interleaved=interleaved, layout=layout)

    @staticmethod
    def backward(ctx, dq, dk):
        saved = ctx.saved_tensors
        cos, sin = saved[0], saved[1]
        pos = saved[2] if ctx.has_pos else None
        dq_in, dk_in = rope_backward(dq, dk, cos, sin, pos, interleaved=ctx.interleaved, layout=ctx.layout)
        return dq_in, dk_in, None, None, None, None, None


def apply_rope(q, k, cos, sin, position_ids=None, *, interleaved: bool = False, layout: str = "bshd"):
    """RoPE on q and k with autograd support (see the module docstring for layouts)."""
    return RoPEFunction.apply(q, k, cos, sin, position_ids, interleaved, layout)


class RoPE(torch.nn.Module):
    """nn.Module form of :func:`apply_rope`; the layout choices are fixed at construction."""

    def __init__(self, interleaved: bool = False, layout: str = "bshd") -> None:
        super().__init__()
        if layout not in _LAYOUTS:
            raise SolkitError(f"rope: layout must be one of {_LAYOUTS}, got {layout!r}")
        self.interleaved, self.layout = interleaved, layout

    def forward(self, q, k, cos, sin, position_ids=None):
        return apply_rope(q, k, cos, sin, position_ids, interleaved=self.interleaved, layout=self.layout)

    def extra_repr(self) -> str:
        return f"interleaved={self.interleaved}, layout={self.layout!r}"


def rope_bytes(batch: int, seq: int, n_q: int, n_k: int, dim: int, dtype: torch.dtype, table_dtype=None,
               table_per_batch: bool = False, backward: bool = False) -> int:  # fmt: skip
    """Minimum bytes of one forward (x2 with ``backward``) call: q/k read + written, cos/sin read once."""
    elem = torch.empty((), dtype=dtype).element_size()
    telem = torch.empty((), dtype=table_dtype or dtype).element_size()
    qk = 2 * elem * batch * seq * dim * (n_q + n_k)
    table = 2 * telem * (batch if table_per_batch else 1) * seq * dim
    return (qk + table) * (2 if backward else 1)
