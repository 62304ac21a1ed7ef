"""A tunable Triton solution of scale2 (y = 2x). HALF=1 is a deliberately wrong, faster variant."""

import triton
import triton.language as tl

SOLKIT_TUNE_SPACE = {
    "params": {"BLOCK": [16, 32, 64, 128], "HALF": [0, 1], "num_warps": [1, 2]},
    "constraints": ["BLOCK >= 16 * num_warps"],
}


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr, HALF: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = (offs < n) & ((HALF == 0) | (pid * 2 < tl.num_programs(0)))
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def run(x, y, *, BLOCK=64, HALF=0, num_warps=2):
    n = x.numel()
    _scale[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, HALF=HALF, num_warps=num_warps)
    return y
