"""Decode-sized GEMM in Gluon, swap-AB on the tensor cores: ``y = act(x @ W.T + bias) * alpha + residual * beta``.

x [M, K] with M <= 64, W [N, K] (nn.Linear layout), residual / y [M, N]; bf16/fp16, fp32 accumulation.
Bytes (the SOL count): (N*K + M*K + 2*M*N) * itemsize with a residual; FLOPs 2*M*N*K (negligible: the call is
a stream of the weight).

Why swap-AB: with M <= 64 rows of x the wgmma's M side (64 rows per warpgroup) would be mostly padding. Computed
as y^T = W . x^T instead, a BW-row tile of W is operand A (from shared memory) and x^T operand B with N = MP
(M padded to 8 / 16 / 32 / 64: TMA zero-fills x's missing rows, which cost no traffic).

The grid is a stream over *units*: a unit is BW rows of W times KSUB*BK columns (KSUB TMA boxes of [BW, BK]),
ordered row tile by row tile, K fastest. Program p of G takes the contiguous units [p*U/G, (p+1)*U/G), so every
program streams the same number of bytes whatever N and K are (a persistent split-K: "stream-K"). Each
program keeps STAGES units in flight in a shared-memory ring (one mbarrier per slot, TMA byte counts); after a
unit's wgmmas retire its slot is refilled with the unit STAGES ahead, so the loads stay in flight across the
reductions and epilogues.

A program that covers a whole row tile (all K) runs the epilogue itself. Otherwise it adds its fp32 partial
[BW, MP] into an L2-resident workspace (relaxed atomics), and, after a CTA barrier, adds the units it covered
to the tile's counter (one gpu-scope acq_rel atomic): the program that brings the counter to the tile's unit
count reads the sum back, zeroes the workspace and the counter for the next call, and runs the epilogue. No
second kernel and no memset.

``NO_MATH`` (measurement only): 1 skips x and the wgmmas (the ring, reductions and epilogue stay), 2 streams W
through the ring and nothing else (the bare read floor of this structure), 3 runs x and the wgmmas but no split
reduction (each partial goes straight to the epilogue: wrong values, the cost of the reduction by difference).

Needs sm_90 and ``triton.experimental.gluon`` (Triton >= 3.6); ``unavailable_reason()`` says why not.

A lab experiment: slower than the Triton decode kernels (``solkit.kernels.gemm.decode``) at every M measured on
the H200 (docs/kernels/gemm-decode.md), so no dispatcher reaches it; call :func:`gemm_decode_gluon` directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from solkit.kernels.common.device import cuda_sm_count, gluon_unavailable_reason

try:  # Gluon is experimental: its absence (older Triton) or a changed API only makes this path unavailable
    import triton
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    # Triton 3.6 names: async_copy_global_to_shared, thread_barrier; later versions async_load, barrier
    _tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    _cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
    _IMPORT_ERROR: str | None = None
except Exception as exc:  # pragma: no cover - depends on the installed Triton
    _IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

ACTIVATIONS = {"none": 0, "silu": 1, "gelu_tanh": 2}
_TORCH_TO_GL = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
MAX_M = 64


@dataclass(frozen=True)
class DecodeGluonConfig:
    """One compiled variant: BW-row W tiles, units of KSUB boxes of BK columns, STAGES units in flight per program,
    CTAS_PER_SM programs per SM (``grid`` overrides the program count), WARPS warps (one warpgroup per 64 rows)."""

    bw: int = 128
    bk: int = 64
    ksub: int = 2
    stages: int = 6
    ctas_per_sm: int = 1
    grid: int = 0
    warps: int = 4
    pre_res: int = 1
    no_math: int = 0
    ws: int = 0  # 1: a producer warp refills the ring (warp-specialised), 0: the compute warps refill it

    @property
    def name(self) -> str:
        g = f"g{self.grid}" if self.grid else f"c{self.ctas_per_sm}"
        s = f"gl {self.bw}x{self.ksub}x{self.bk} st{self.stages} {g} w{self.warps}"
        s += (" pre" if self.pre_res else "") + (" ws" if self.ws else "")
        return s + (f" nomath{self.no_math}" if self.no_math else "")

    def smem_bytes(self, mp: int, itemsize: int = 2) -> int:
        return self.stages * self.ksub * (self.bw + mp) * self.bk * itemsize + 8 * self.stages + 64


DEFAULT_CONFIG = DecodeGluonConfig()
SMEM_LIMIT = 227 * 1024


def unavailable_reason(device: torch.device | None = None) -> str | None:
    """Why this kernel cannot run on ``device`` (default: the current CUDA device), or None if it can."""
    return gluon_unavailable_reason(_IMPORT_ERROR, device)


def supports(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None = None) -> bool:
    """Operands this kernel takes: 2-D, one bf16/fp16 dtype, 1 <= M <= 64, TMA-addressable x and W (16-byte aligned
    bases and rows), contiguous rows of the residual."""
    if x.dim() != 2 or weight.dim() != 2 or x.dtype not in _TORCH_TO_GL or weight.dtype != x.dtype:
        return False
    m, k = x.shape
    if not 1 <= m <= MAX_M or weight.shape[1] != k or k == 0:
        return False
    for t in (x, weight):
        if t.stride(-1) != 1 or (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
            return False
    return residual is None or (
        residual.dtype == x.dtype and tuple(residual.shape) == (m, weight.shape[0]) and residual.stride(-1) == 1
    )


def padded_m(m: int) -> int:
    """wgmma's N for M rows of x: 8, 16, 32 or 64."""
    return max(8, 1 << (m - 1).bit_length())


if _IMPORT_ERROR is None:

    @gluon.jit
    def _issue(w_desc, x_desc, w_ring, x_ring, ready, slot, u, KT, KSUB: gl.constexpr, NO_MATH: gl.constexpr):
        # unit u -> row tile u // KT, K step u % KT: KSUB boxes of W (and of x unless NO_MATH) into ring slot `slot`
        BW: gl.constexpr = w_desc.block_type.shape[0]
        BK: gl.constexpr = w_desc.block_type.shape[1]
        row = (u // KT) * BW
        k0 = (u % KT) * (KSUB * BK)
        NO_X: gl.constexpr = NO_MATH == 1 or NO_MATH == 2
        if NO_X:
            mbarrier.expect(ready.index(slot), KSUB * w_desc.block_type.nbytes)
        else:
            mbarrier.expect(ready.index(slot), KSUB * (w_desc.block_type.nbytes + x_desc.block_type.nbytes))
        for j in gl.static_range(KSUB):
            _tma_load(w_desc, [row, k0 + j * BK], ready.index(slot), w_ring.index(slot * KSUB + j))
            if not NO_X:
                _tma_load(x_desc, [0, k0 + j * BK], ready.index(slot), x_ring.index(slot * KSUB + j))

    @gluon.jit
    def _residual_tile(res_ptr, t, M, N, stride_rm, BW: gl.constexpr, MP: gl.constexpr, layout: gl.constexpr):
        # residual^T for row tile t: [BW, MP], element (n, m) = residual[m, t*BW + n]; zeros outside M x N
        rows = t * BW + gl.arange(0, BW, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, MP, layout=gl.SliceLayout(0, layout))
        n_idx = gl.expand_dims(rows, 1)
        m_idx = gl.expand_dims(cols, 0)
        mask = (n_idx < N) & (m_idx < M)
        return gl.load(res_ptr + m_idx * stride_rm + n_idx, mask=mask, other=0.0)

    @gluon.jit
    def _flush(acc, t, count, KT, r_pre, y_ptr, res_ptr, bias_ptr, ws_ptr, cnt_ptr, M, N, stride_ym, stride_rm,
               alpha, beta, HAS_BIAS: gl.constexpr, HAS_RESIDUAL: gl.constexpr, ACT: gl.constexpr,
               PRE_RES: gl.constexpr, NO_MATH: gl.constexpr):  # fmt: skip
        # the partial product of `count` units of row tile t: the epilogue if they are the whole tile or the last
        # to arrive, else into the workspace
        BW: gl.constexpr = acc.shape[0]
        MP: gl.constexpr = acc.shape[1]
        layout: gl.constexpr = acc.type.layout
        rows = t * BW + gl.arange(0, BW, layout=gl.SliceLayout(1, layout))
        cols = gl.arange(0, MP, layout=gl.SliceLayout(0, layout))
        n_idx = gl.expand_dims(rows, 1)
        m_idx = gl.expand_dims(cols, 0)
        mask = (n_idx < N) & (m_idx < M)
        total = acc
        last = count == KT
        if NO_MATH == 3:  # measurement only: every partial stored as if it were the tile's total (wrong values)
            last = count > 0
        elif count != KT:
            ws_offs = t * (BW * MP) + (n_idx - t * BW) * MP + m_idx
            gl.atomic_add(ws_ptr + ws_offs, acc, mask=mask, sem="relaxed", scope="gpu")
            _cta_barrier()  # every thread's partial is added before the ticket is drawn
            ticket = gl.atomic_add(cnt_ptr + t, count, sem="acq_rel", scope="gpu")
            last = ticket + count == KT
            if last:
                total = gl.load(ws_ptr + ws_offs, mask=mask, other=0.0, cache_modifier=".cg")
                gl.store(ws_ptr + ws_offs, gl.zeros_like(total), mask=mask)  # ready for the next call
                gl.store(cnt_ptr + t, 0)
        if last:
            if HAS_BIAS:
                b = gl.load(bias_ptr + rows, mask=rows < N, other=0.0).to(gl.float32)
                total = total + gl.expand_dims(b, 1)
            if ACT == 1:  # SiLU
                total = total / (1.0 + gl.exp(-total))
            elif ACT == 2:  # GELU, tanh form: tanh(u) = 1 - 2 / (exp(2u) + 1)
                u = 0.7978845608028654 * (total + 0.044715 * total * total * total)
                total = 0.5 * total * (2.0 - 2.0 / (gl.exp(2.0 * u) + 1.0))
            total = total * alpha
            if HAS_RESIDUAL:
                if PRE_RES:
                    r = r_pre
                else:
                    r = gl.load(res_ptr + m_idx * stride_rm + n_idx, mask=mask, other=0.0)
                total = total + r.to(gl.float32) * beta
            gl.store(y_ptr + m_idx * stride_ym + n_idx, total.to(y_ptr.dtype.element_ty), mask=mask)

    @gluon.jit
    def _consume(w_desc, w_ring, x_ring, ready, empty, u0, u1, KT, y_ptr, res_ptr, bias_ptr, ws_ptr, cnt_ptr, M, N,
                 stride_ym, stride_rm, alpha, beta, x_desc, HAS_BIAS: gl.constexpr, HAS_RESIDUAL: gl.constexpr,
                 ACT: gl.constexpr, STAGES: gl.constexpr, KSUB: gl.constexpr, PRE_RES: gl.constexpr,
                 NO_MATH: gl.constexpr, WARPS: gl.constexpr, WS: gl.constexpr):  # fmt: skip
        # the units' wgmmas out of the ring, and each tile segment's flush. WS 0: this partition also refills each
        # slot (the unit STAGES ahead) once its wgmmas retire; WS 1: it releases the slot to the producer warp.
        BW: gl.constexpr = w_desc.block_type.shape[0]
        MP: gl.constexpr = x_desc.block_type.shape[0]
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, MP, 16]
        )
        # the residual of the row tile this program ends in, in registers before the stream (its DRAM latency
        # off the tail); another tile's residual is loaded when needed
        t_end = (u1 - 1) // KT
        r_pre = gl.zeros([BW, MP], w_desc.dtype, acc_layout)
        if HAS_RESIDUAL and PRE_RES and NO_MATH != 2:
            r_pre = _residual_tile(res_ptr, t_end, M, N, stride_rm, BW, MP, acc_layout)
        acc = gl.zeros([BW, MP], gl.float32, acc_layout)
        seg = u0
        for u in range(u0, u1):
            i = u - u0
            s = i % STAGES
            mbarrier.wait(ready.index(s), (i // STAGES) & 1)
            if NO_MATH == 0 or NO_MATH == 3:
                for j in gl.static_range(KSUB):
                    acc = warpgroup_mma(w_ring.index(s * KSUB + j), x_ring.index(s * KSUB + j).permute((1, 0)), acc,
                                        is_async=True)  # fmt: skip
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            if WS:
                mbarrier.arrive(empty.index(s))
            else:
                _cta_barrier()  # every warp is done reading slot s before it is refilled
                if u + STAGES < u1:
                    _issue(w_desc, x_desc, w_ring, x_ring, ready, s, u + STAGES, KT, KSUB, NO_MATH)
            if NO_MATH != 2:
                t = u // KT
                if (u % KT == KT - 1) | (u == u1 - 1):
                    r = r_pre
                    if HAS_RESIDUAL and PRE_RES:  # noqa: SIM102 - constexpr tests, then a runtime one
                        if t != t_end:
                            r = _residual_tile(res_ptr, t, M, N, stride_rm, BW, MP, acc_layout)
                    _flush(acc, t, u + 1 - seg, KT, r, y_ptr, res_ptr, bias_ptr, ws_ptr, cnt_ptr, M, N, stride_ym,
                           stride_rm, alpha, beta, HAS_BIAS, HAS_RESIDUAL, ACT, PRE_RES, NO_MATH)  # fmt: skip
                    acc = gl.zeros([BW, MP], gl.float32, acc_layout)
                    seg = u + 1
        if NO_MATH == 2:  # one word per program into y (not the workspace, which stays zero), an observable end
            gl.store(y_ptr + gl.program_id(0) % N, (u1 - u0).to(y_ptr.dtype.element_ty))

    @gluon.jit
    def _produce(w_desc, x_desc, w_ring, x_ring, ready, empty, u0, u1, KT, STAGES: gl.constexpr, KSUB: gl.constexpr,
                 NO_MATH: gl.constexpr):  # fmt: skip
        # WS 1: one warp keeps the ring full, refilling each slot as soon as the consumer releases it
        for u in range(u0 + STAGES, u1):
            i = u - u0
            s = i % STAGES
            mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
            _issue(w_desc, x_desc, w_ring, x_ring, ready, s, u, KT, KSUB, NO_MATH)

    @gluon.jit
    def _decode_swap_kernel(w_desc, x_desc, y_ptr, res_ptr, bias_ptr, ws_ptr, cnt_ptr, M, N, K, stride_ym, stride_rm,
                            alpha, beta, HAS_BIAS: gl.constexpr, HAS_RESIDUAL: gl.constexpr, ACT: gl.constexpr,
                            STAGES: gl.constexpr, KSUB: gl.constexpr, PRE_RES: gl.constexpr,
                            NO_MATH: gl.constexpr, WARPS: gl.constexpr, WS: gl.constexpr):  # fmt: skip
        BW: gl.constexpr = w_desc.block_type.shape[0]
        BK: gl.constexpr = w_desc.block_type.shape[1]
        MP: gl.constexpr = x_desc.block_type.shape[0]
        dtype: gl.constexpr = w_desc.dtype
        n_tiles = gl.cdiv(N, BW)
        KT = gl.cdiv(K, KSUB * BK)
        units = n_tiles * KT
        pid = gl.program_id(0)
        progs = gl.num_programs(0)
        u0 = (pid * units) // progs
        u1 = ((pid + 1) * units) // progs
        w_ring = gl.allocate_shared_memory(dtype, [STAGES * KSUB, BW, BK], w_desc.layout)
        x_ring = gl.allocate_shared_memory(dtype, [STAGES * KSUB, MP, BK], x_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for p in gl.static_range(STAGES):
            mbarrier.init(ready.index(p), count=1)
            mbarrier.init(empty.index(p), count=1)
        # the first STAGES units before anything else (the producer warp, if any, takes over from there)
        for p in gl.static_range(STAGES):
            if u0 + p < u1:
                _issue(w_desc, x_desc, w_ring, x_ring, ready, p, u0 + p, KT, KSUB, NO_MATH)
        if WS:
            gl.warp_specialize(
                [
                    (_consume, (w_desc, w_ring, x_ring, ready, empty, u0, u1, KT, y_ptr, res_ptr, bias_ptr, ws_ptr,
                                cnt_ptr, M, N, stride_ym, stride_rm, alpha, beta, x_desc, HAS_BIAS, HAS_RESIDUAL, ACT,
                                STAGES, KSUB, PRE_RES, NO_MATH, WARPS, WS)),
                    (_produce, (w_desc, x_desc, w_ring, x_ring, ready, empty, u0, u1, KT, STAGES, KSUB, NO_MATH)),
                ],
                [1],
                [40],
            )  # fmt: skip
        else:
            _consume(w_desc, w_ring, x_ring, ready, empty, u0, u1, KT, y_ptr, res_ptr, bias_ptr, ws_ptr, cnt_ptr, M, N,
                     stride_ym, stride_rm, alpha, beta, x_desc, HAS_BIAS, HAS_RESIDUAL, ACT, STAGES, KSUB, PRE_RES,
                     NO_MATH, WARPS, WS)  # fmt: skip


def _smem_layout(block: list[int], dtype: torch.dtype) -> Any:
    return gl.NVMMASharedLayout.get_default_for(block, getattr(gl, _TORCH_TO_GL[dtype]))


#: device -> [fp32 workspace, int32 counters], both zero between calls (the kernel leaves them so). Grown, never
#: shrunk; outgrown ones are kept alive (a CUDA graph captured earlier may still point at them).
_SCRATCH: dict[str, list[torch.Tensor]] = {}
_OUTGROWN: list[torch.Tensor] = []


def _scratch(device: torch.device, floats: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:
    key = str(device)
    have = _SCRATCH.get(key)
    if have is None or have[0].numel() < floats or have[1].numel() < counters:
        if have is not None:
            _OUTGROWN.extend(have)
            floats, counters = max(floats, have[0].numel()), max(counters, have[1].numel())
        have = [torch.zeros(floats, dtype=torch.float32, device=device),
                torch.zeros(counters, dtype=torch.int32, device=device)]  # fmt: skip
        _SCRATCH[key] = have
    return have[0], have[1]


def program_count(cfg: DecodeGluonConfig, n: int, k: int, sms: int) -> int:
    units = triton.cdiv(n, cfg.bw) * triton.cdiv(k, cfg.ksub * cfg.bk)
    return max(1, min(units, cfg.grid or cfg.ctas_per_sm * sms))


def gemm_decode_gluon(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    *,
    activation: str = "none",
    alpha: float = 1.0,
    beta: float = 1.0,
    config: DecodeGluonConfig | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``act(x @ weight.T + bias) * alpha + residual * beta`` for M <= 64 by the swap-AB Gluon stream.

    x [M, K], weight [N, K], bias [N], residual [M, N]; the caller checks ``unavailable_reason()`` and ``supports``.
    """
    cfg = config or DEFAULT_CONFIG
    m, k = x.shape
    n = weight.shape[0]
    mp = padded_m(m)
    y = out if out is not None else torch.empty((m, n), device=x.device, dtype=x.dtype)
    w_block, x_block = [cfg.bw, cfg.bk], [mp, cfg.bk]
    w_desc = TensorDescriptor.from_tensor(weight, w_block, _smem_layout(w_block, x.dtype))
    x_desc = TensorDescriptor.from_tensor(x, x_block, _smem_layout(x_block, x.dtype))
    n_tiles = triton.cdiv(n, cfg.bw)
    grid = program_count(cfg, n, k, cuda_sm_count(x.device.index or 0))
    ws, cnt = _scratch(x.device, n_tiles * cfg.bw * mp, n_tiles)
    _decode_swap_kernel[(grid,)](
        w_desc, x_desc, y, residual if residual is not None else y, bias if bias is not None else y, ws, cnt,
        m, n, k, y.stride(0), residual.stride(0) if residual is not None else 0, float(alpha), float(beta),
        HAS_BIAS=bias is not None, HAS_RESIDUAL=residual is not None, ACT=ACTIVATIONS[activation],
        STAGES=cfg.stages, KSUB=cfg.ksub, PRE_RES=cfg.pre_res, NO_MATH=cfg.no_math, WARPS=cfg.warps, WS=cfg.ws,
        num_warps=cfg.warps,
    )  # fmt: skip
    return y


def compile_sm90(cfg: DecodeGluonConfig = DEFAULT_CONFIG, *, m: int = 1, dtype: str = "bf16",
                 has_bias: bool = False, has_residual: bool = True, act: int = 0) -> Any:  # fmt: skip
    """Compile the kernel for sm_90 without a GPU (to read its PTX, and to catch API errors early)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    gl_dtype = getattr(gl, {"bf16": "bfloat16", "fp16": "float16"}[dtype])

    def desc(block: list[int]) -> str:
        layout = gl.NVMMASharedLayout.get_default_for(block, gl_dtype)
        return f"tensordesc<{dtype}[{block[0]}, {block[1]}],{layout!r}>"

    sig = {
        "w_desc": desc([cfg.bw, cfg.bk]), "x_desc": desc([padded_m(m), cfg.bk]), "y_ptr": f"*{dtype}",
        "res_ptr": f"*{dtype}", "bias_ptr": f"*{dtype}", "ws_ptr": "*fp32", "cnt_ptr": "*i32", "M": "i32",
        "N": "i32", "K": "i32", "stride_ym": "i32", "stride_rm": "i32", "alpha": "fp32", "beta": "fp32",
        "HAS_BIAS": "constexpr", "HAS_RESIDUAL": "constexpr", "ACT": "constexpr", "STAGES": "constexpr",
        "KSUB": "constexpr", "PRE_RES": "constexpr", "NO_MATH": "constexpr", "WARPS": "constexpr", "WS": "constexpr",
    }  # fmt: skip
    constexprs = {
        "HAS_BIAS": has_bias, "HAS_RESIDUAL": has_residual, "ACT": act, "STAGES": cfg.stages, "KSUB": cfg.ksub,
        "PRE_RES": cfg.pre_res, "NO_MATH": cfg.no_math, "WARPS": cfg.warps, "WS": cfg.ws,
    }  # fmt: skip
    src = GluonASTSource(_decode_swap_kernel, sig, constexprs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg.warps})


def rule_for(rules: list[dict[str, Any]] | None, m: int, n: int, k: int) -> DecodeGluonConfig | None:
    """The config of the first rule whose M / N / K ranges hold the shape (a benchmark's plan of which config
    to run per shape): ``{m_min, m_max, n_min, n_max, k_min, k_max, config: {DecodeGluonConfig fields}}``,
    bounds inclusive, a bound left out is open. None: no rule matches."""
    for rule in rules or []:
        inside = all(
            rule.get(f"{d}_min", 0) <= v <= rule.get(f"{d}_max", 1 << 62) for d, v in (("m", m), ("n", n), ("k", k))
        )
        if inside:
            return config_from(rule.get("config", {}))
    return None


def config_from(fields: dict[str, Any]) -> DecodeGluonConfig:
    return DecodeGluonConfig(**{f: fields[f] for f in DecodeGluonConfig.__dataclass_fields__ if f in fields})
