"""Small, self-contained Triton kernels the tuner is benchmarked on (sweeps, live runs, tests).

Each ``make_*_problem`` returns a :class:`~solkit.tune.records.TuneProblem` (inputs, launcher, fp32
reference, compile job) and each ``*_space`` the declared search space. Kernels are importable by
module path, which is what lets compile workers in other processes build them.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from solkit.tune.records import CompileJob, ProblemRef, TuneProblem
from solkit.tune.space import Space, gemm_smem_bytes


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    """C = A @ B with fp32 accumulation, C stored in its own dtype.

    FLOPs 2·M·N·K; bytes at best (each operand once) (M·K + K·N + M·N)·elem. Program ids walk
    GROUP_M row-blocks per column panel so that neighbouring programs reuse B tiles from L2.
    """
    pid = tl.program_id(0)
    blocks_m = tl.cdiv(M, BLOCK_M)
    blocks_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * blocks_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(blocks_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group
    # Out-of-range rows/cols wrap (modulo) instead of masking, so the main loop loads stay unmasked
    # in M and N; the store is masked.
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    om = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + om[:, None] * stride_cm + on[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(om[:, None] < M) & (on[None, :] < N))


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, eps,
                   BLOCK_N: tl.constexpr, ROWS: tl.constexpr):  # fmt: skip
    """y = x · rsqrt(mean(x²) + eps) · w per row; fp32 statistics.

    Bytes: 2·rows·cols·elem (read x, write y) + cols·elem (w). Chunks of BLOCK_N columns, ROWS rows
    per program; the second pass re-reads x, which hits L1/L2 for the row sizes tuned here.
    """
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    sq = tl.zeros((ROWS, BLOCK_N), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        m = row_ok[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=m, other=0.0).to(tl.float32)
        sq += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(sq, axis=1) / n_cols + eps)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        m = row_ok[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        y = x * rstd[:, None] * w[None, :]
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y, BLOCK_N: tl.constexpr, ROWS: tl.constexpr):
    """y = exp(x − max) / Σ exp(x − max) per row (online max/sum over BLOCK_N chunks, fp32).

    Bytes: 2·rows·cols·elem; the normalising pass re-reads x (L2 for these row sizes).
    """
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    run_max = tl.full((ROWS,), -float("inf"), dtype=tl.float32)
    run_sum = tl.zeros((ROWS,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        m = row_ok[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=m, other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(run_max, tl.max(x, axis=1))
        # Rows that are entirely out of range keep -inf maxima; guard the rescale against inf - inf.
        safe_max = tl.where(new_max == -float("inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - safe_max) + tl.sum(tl.exp(x - safe_max[:, None]), axis=1)
        run_max = new_max
    inv = 1.0 / run_sum
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        m = row_ok[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=m, other=-float("inf")).to(tl.float32)
        y = tl.exp(x - run_max[:, None]) * inv[:, None]
        tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def cross_entropy_kernel(logits_ptr, target_ptr, loss_ptr, n_cols, stride, BLOCK_V: tl.constexpr):
    """loss[r] = logsumexp(logits[r]) − logits[r, target[r]] (fp32), one row per program.

    Bytes: rows·V·elem (logits, read once) + rows·(8 + 4) (targets, losses). Online logsumexp over
    BLOCK_V chunks.
    """
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride
    run_max = -float("inf")
    run_sum = 0.0
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        x = tl.load(base + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(run_max, tl.max(x, axis=0))
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
        run_max = new_max
    target = tl.load(target_ptr + row)
    picked = tl.load(base + target).to(tl.float32)
    tl.store(loss_ptr + row, tl.log(run_sum) + run_max - picked)


# --------------------------------------------------------------------------- spaces
def gemm_space(smem_limit_bytes: int | None = None, elem_bytes: int = 2) -> Space:
    """BLOCK_M, BLOCK_N ∈ {64,128,256}, BLOCK_K ∈ {32,64,128}, warps ∈ {4,8}, stages ∈ {2..5}: 216 configs."""
    return Space(
        {
            "BLOCK_M": [64, 128, 256],
            "BLOCK_N": [64, 128, 256],
            "BLOCK_K": [32, 64, 128],
            "GROUP_M": [8],
            "num_warps": [4, 8],
            "num_stages": [2, 3, 4, 5],
        },  # fmt: skip
        smem_bytes=gemm_smem_bytes(elem_bytes),
        smem_limit_bytes=smem_limit_bytes,
        name="gemm",
    )


def row_space(max_block: int, kernel: str) -> Space:
    """BLOCK_N (chunk width) × ROWS per program × warps × stages, capped at 16K elements per tile."""
    blocks = [b for b in (512, 1024, 2048, 4096, 8192, 16384) if b <= max_block]
    return Space(
        {"BLOCK_N": blocks, "ROWS": [1, 2, 4, 8], "num_warps": [2, 4, 8, 16], "num_stages": [1, 2, 3]},
        ["BLOCK_N * ROWS <= 16384", "BLOCK_N * ROWS >= 64 * num_warps"],
        name=kernel,
    )


def cross_entropy_space() -> Space:
    """BLOCK_V ∈ {1024..32768} × warps ∈ {1..32} × stages ∈ {1..4}."""
    return Space(
        {
            "BLOCK_V": [1024, 2048, 4096, 8192, 16384, 32768],
            "num_warps": [1, 2, 4, 8, 16, 32],
            "num_stages": [1, 2, 3, 4],
        },  # fmt: skip
        ["BLOCK_V >= 32 * num_warps"],
        name="cross_entropy",
    )


# --------------------------------------------------------------------------- problems
def _split(config: dict) -> tuple[dict, dict]:
    meta = {k: v for k, v in config.items() if k not in Space.LAUNCH_OPTIONS}
    launch = {k: v for k, v in config.items() if k in Space.LAUNCH_OPTIONS}
    return meta, launch


_MOD = __name__


def make_gemm_problem(M: int, N: int, K: int, dtype: torch.dtype = torch.bfloat16, device: str = "cuda") -> TuneProblem:
    def make_inputs(seed: int):
        g = torch.Generator(device="cpu").manual_seed(seed)
        a = torch.randn(M, K, generator=g).to(device=device, dtype=dtype)
        b = (torch.randn(K, N, generator=g) / math.sqrt(K)).to(device=device, dtype=dtype)
        c = torch.empty(M, N, device=device, dtype=dtype)
        return (a, b, c)

    def args(a, b, c):
        return (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))

    def run(config, inputs):
        meta, launch = _split(config)
        a, b, c = inputs
        grid = (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        matmul_kernel[grid](*args(a, b, c), **meta, **launch)
        return c

    def compile_job(config):
        meta, launch = _split(config)
        mock = (dtype, dtype, dtype, M, N, K, K, 1, N, 1, N, 1)  # torch dtypes stand in for tensors
        return CompileJob(_MOD, "matmul_kernel", mock, {**meta, **launch})

    return TuneProblem(
        ref=ProblemRef(_MOD, "make_gemm_problem", (M, N, K), {"dtype": dtype, "device": device}),
        name=f"gemm_{str(dtype).split('.')[-1]}_M{M}_N{N}_K{K}",
        make_inputs=make_inputs,
        run=run,
        reference=lambda inp: inp[0].float() @ inp[1].float(),
        same_dtype=lambda inp: inp[0] @ inp[1],
        output_index=2,
        compile_job=compile_job,
        flops=2.0 * M * N * K,
        bytes_moved=(M * K + K * N + M * N) * torch.finfo(dtype).bits // 8,
        meta={"kernel": "gemm", "M": M, "N": N, "K": K, "dtype": str(dtype).split(".")[-1]},
    )


def _row_problem(kind: str, rows: int, cols: int, dtype: torch.dtype, device: str) -> TuneProblem:
    elem = torch.finfo(dtype).bits // 8

    def make_inputs(seed: int):
        g = torch.Generator(device="cpu").manual_seed(seed)
        x = (torch.randn(rows, cols, generator=g) * 2).to(device=device, dtype=dtype)
        y = torch.empty_like(x)
        if kind == "rmsnorm":
            w = (1 + 0.1 * torch.randn(cols, generator=g)).to(device=device, dtype=dtype)
            return (x, w, y)
        return (x, y)

    def run(config, inputs):
        meta, launch = _split(config)
        grid = (triton.cdiv(rows, meta["ROWS"]),)
        if kind == "rmsnorm":
            x, w, y = inputs
            rmsnorm_kernel[grid](x, w, y, rows, cols, x.stride(0), y.stride(0), 1e-6, **meta, **launch)
        else:
            x, y = inputs
            softmax_kernel[grid](x, y, rows, cols, x.stride(0), y.stride(0), **meta, **launch)
        return y

    def reference(inputs):
        x = inputs[0].float()
        if kind == "rmsnorm":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * inputs[1].float()
        return torch.softmax(x, dim=-1)

    def same_dtype(inputs):
        x = inputs[0]
        if kind == "rmsnorm":
            return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)) * inputs[1]
        return torch.softmax(x, dim=-1)

    def compile_job(config):
        meta, launch = _split(config)
        if kind == "rmsnorm":
            mock = (dtype, dtype, dtype, rows, cols, cols, cols, 1e-6)
            return CompileJob(_MOD, "rmsnorm_kernel", mock, {**meta, **launch})
        return CompileJob(_MOD, "softmax_kernel", (dtype, dtype, rows, cols, cols, cols), {**meta, **launch})

    return TuneProblem(
        ref=ProblemRef(_MOD, f"make_{kind}_problem", (rows, cols), {"dtype": dtype, "device": device}),
        name=f"{kind}_{str(dtype).split('.')[-1]}_{rows}x{cols}",
        make_inputs=make_inputs,
        run=run,
        reference=reference,
        same_dtype=same_dtype,
        output_index=2 if kind == "rmsnorm" else 1,
        compile_job=compile_job,
        flops=0.0,
        bytes_moved=(2 * rows * cols + (cols if kind == "rmsnorm" else 0)) * elem,
        meta={"kernel": kind, "rows": rows, "cols": cols, "dtype": str(dtype).split(".")[-1]},
    )


def make_rmsnorm_problem(
    rows: int, cols: int, dtype: torch.dtype = torch.bfloat16, device: str = "cuda"
) -> TuneProblem:
    return _row_problem("rmsnorm", rows, cols, dtype, device)


def make_softmax_problem(
    rows: int, cols: int, dtype: torch.dtype = torch.bfloat16, device: str = "cuda"
) -> TuneProblem:
    return _row_problem("softmax", rows, cols, dtype, device)


def make_cross_entropy_problem(
    rows: int, vocab: int, dtype: torch.dtype = torch.bfloat16, device: str = "cuda"
) -> TuneProblem:
    elem = torch.finfo(dtype).bits // 8

    def make_inputs(seed: int):
        g = torch.Generator(device="cpu").manual_seed(seed)
        logits = (torch.randn(rows, vocab, generator=g) * 3).to(device=device, dtype=dtype)
        target = torch.randint(0, vocab, (rows,), generator=g).to(device)
        loss = torch.empty(rows, device=device, dtype=torch.float32)
        return (logits, target, loss)

    def run(config, inputs):
        meta, launch = _split(config)
        logits, target, loss = inputs
        cross_entropy_kernel[(rows,)](logits, target, loss, vocab, logits.stride(0), **meta, **launch)
        return loss

    def compile_job(config):
        meta, launch = _split(config)
        return CompileJob(_MOD, "cross_entropy_kernel", (dtype, torch.int64, torch.float32, vocab, vocab),
                          {**meta, **launch})  # fmt: skip

    return TuneProblem(
        ref=ProblemRef(_MOD, "make_cross_entropy_problem", (rows, vocab), {"dtype": dtype, "device": device}),
        name=f"cross_entropy_{str(dtype).split('.')[-1]}_{rows}x{vocab}",
        make_inputs=make_inputs,
        run=run,
        reference=lambda inp: torch.nn.functional.cross_entropy(inp[0].float(), inp[1], reduction="none"),
        same_dtype=lambda inp: torch.nn.functional.cross_entropy(inp[0], inp[1], reduction="none").float(),
        output_index=2,
        compile_job=compile_job,
        flops=0.0,
        bytes_moved=rows * vocab * elem + rows * 12,
        meta={"kernel": "cross_entropy", "rows": rows, "vocab": vocab, "dtype": str(dtype).split(".")[-1]},
    )
