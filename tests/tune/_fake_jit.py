"""Stand-ins for @triton.jit functions, for compile-pool tests on machines without a GPU.

``fake_kernel.warmup`` behaves according to its ``mode`` keyword: compile fine, run out of
shared memory, fail to compile, hang, or kill its process.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace


class OutOfResources(Exception):
    pass


class CompilationError(Exception):
    pass


class _FakeJit:
    def warmup(self, *args, grid, mode="ok", **kwargs):
        if mode == "oor":
            raise OutOfResources("out of resource: shared memory, Required: 294912, Hardware limit: 232448")
        if mode == "error":
            raise CompilationError("at 3:4: bad tile")
        if mode == "hang":
            time.sleep(120)
        if mode == "crash":
            os._exit(3)
        return SimpleNamespace(_init_handles=lambda: None, n_regs=64, n_spills=0, metadata=SimpleNamespace(shared=1024))


fake_kernel = _FakeJit()


def make_fake_problem(n: int = 64):
    """A CPU problem whose ``mode`` parameter picks how a config behaves when it runs
    (for isolated-benchmarking tests; rebuilt in a child process from its ProblemRef)."""
    import torch

    from solkit.tune.records import ProblemRef, TuneProblem

    def make_inputs(seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(n, generator=g) + 3.0, torch.empty(n))

    def run(cfg, inputs):
        x, y = inputs
        mode = cfg["mode"]
        if mode == "illegal":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        if mode == "exit":
            os._exit(7)  # the process dies, as on a segfault
        if mode == "hang":
            time.sleep(600)
        if mode == "wrong":
            y.copy_(x * 3.0)
            return y
        time.sleep(0.0002 * cfg["work"])
        torch.mul(x, 2.0, out=y)
        return y

    problem = TuneProblem("fake_isolated", make_inputs, run, reference=lambda inp: inp[0].double() * 2, output_index=1)
    problem.ref = ProblemRef(__file__, "make_fake_problem", (n,))
    return problem
