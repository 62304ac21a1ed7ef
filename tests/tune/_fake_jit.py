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
