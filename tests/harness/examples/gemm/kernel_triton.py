"""Tiled GEMM C = A @ B (bf16 in/out, fp32 accumulation), grouped tile order for L2 reuse.

FLOPs 2·M·N·K; ideal bytes 2·(M·K + K·N + M·N).
"""

import triton
import triton.language as tl


@triton.jit
def _gemm(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    grid_m, grid_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    width = GROUP * grid_n
    group = pid // width
    first_m = group * GROUP
    rows_in_group = min(grid_m - first_m, GROUP)
    pid_m = first_m + (pid % width) % rows_in_group
    pid_n = (pid % width) // rows_in_group
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(A + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)  # fmt: skip
        b = tl.load(B + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)  # fmt: skip
        acc = tl.dot(a, b, acc)
    tl.store(C + rm[:, None] * scm + rn[None, :] * scn, acc.to(C.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))  # fmt: skip


def run(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    big = M >= 1024 and N >= 1024
    BM, BN, BK = (128, 256, 64) if big else (32, 32, 32)
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    _gemm[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
                BM=BM, BN=BN, BK=BK, GROUP=8, num_warps=8 if big else 4, num_stages=3 if big else 2)  # fmt: skip
