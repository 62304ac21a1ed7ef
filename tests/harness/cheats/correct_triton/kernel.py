"""A correct Triton solution in destination-passing style (one program per row): must PASS."""

import triton
import triton.language as tl


@triton.jit
def _rmsnorm_rows(X, W, Y, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(X + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        acc += x * x
    inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        m = cols < n_cols
        x = tl.load(X + row * n_cols + cols, mask=m, other=0.0)
        w = tl.load(W + cols, mask=m, other=0.0)
        tl.store(Y + row * n_cols + cols, x * inv * w, mask=m)


def run(x, weight, y):
    rows, cols = x.shape
    block = min(triton.next_power_of_2(cols), 1024)
    _rmsnorm_rows[(rows,)](x, weight, y, cols, 1e-6, BLOCK=block)
