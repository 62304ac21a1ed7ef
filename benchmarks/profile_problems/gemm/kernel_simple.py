"""Tiled bf16 GEMM C = A @ B (+ R) with fp32 accumulation on tensor cores (tl.dot), grouped tile order.

FLOPs 2*M*N*K. Bytes (fused): A (M*K*2) + B (K*N*2) + C (M*N*2) [+ R (M*N*2)]."""

import torch
import triton
import triton.language as tl


@triton.jit
def _matmul(A, B, C, R, M, N, K, sam, sak, sbk, sbn, scm, scn, HAS_R: tl.constexpr,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    n_m, n_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP * n_n)
    first_m = group * GROUP
    size = min(n_m - first_m, GROUP)
    pm = first_m + (pid % (GROUP * n_n)) % size
    pn = (pid % (GROUP * n_n)) // size
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(A + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if HAS_R:
        acc += tl.load(R + rm[:, None] * scm + rn[None, :] * scn, mask=mask, other=0.0).to(tl.float32)
    tl.store(C + rm[:, None] * scm + rn[None, :] * scn, acc.to(C.dtype.element_ty), mask=mask)


def matmul(a, b, residual=None):
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=a.dtype)
    r = residual if residual is not None else c
    grid = (triton.cdiv(m, 128) * triton.cdiv(n, 128),)
    _matmul[grid](a, b, c, r, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                  HAS_R=residual is not None, BM=128, BN=128, BK=64, GROUP=8, num_warps=8, num_stages=3)  # fmt: skip
    return c


def run(a, w):
    return matmul(a, w.t())
