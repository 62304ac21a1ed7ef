"""Which GEMM path and which tile configs a call gets on a device: :func:`plan`, pure (no GPU, no launch), so the
dispatcher and the CPU tests share one decision.

The paths and what each needs of the device (:data:`PATHS`, fastest first, the portable one last), checked by
:func:`solkit.kernels.common.capability.choose` / ``unmet`` against :func:`device_caps` (or :func:`simulate`):

* ``gluon_ws``: the warp-specialised Gluon kernel; sm_90 only (wgmma and Gluon's Hopper ops are sm_90a
  instructions), at the shared memory of its default config;
* ``tma_persistent``: the persistent TMA kernel; any part with TMA (sm_90 and later: Triton lowers its ``tl.dot``
  to wgmma on sm_90, tcgen05 on sm_100, mma.sync on sm_120), where its smallest tuned config fits as tuned;
* ``splitk``: the decode kernel; its tuned list reads W through TMA descriptors, so TMA parts;
* ``pointer``: masked-load blocks, every part and the interpreter.

Then the shape rules among the paths the device meets: decode (M <= decode_max_m) takes ``splitk``, prefill
``gluon_ws`` (M >= GLUON_MIN_M, aligned bf16/fp16, K and N multiples of 16) and else ``tma_persistent`` (TMA-aligned
bf16/fp16), and everything else ``pointer``. The CPU interpreter meets only ``pointer`` (its own small tiles);
an explicit ``config=`` still runs any Triton kernel there, since the interpreter emulates them all.

Configs: the family table whose kernel it is (``hopper`` for tma_persistent and splitk, ``ampere`` for pointer,
``interpreter`` on the CPU). Where that table was measured on the device's architecture (its ``measured_on``,
through :func:`solkit.kernels.common.tuned.for_arch`) the list is used as it is. Elsewhere it is derived from
the device's shared memory (:func:`fit_configs`): a config whose :func:`smem_estimate` exceeds the part's
shared memory per block loses pipeline stages (down to 2) until it fits, or is dropped; nothing left raises a
one-line SolkitError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from solkit.errors import SolkitError
from solkit.kernels.common import tuned
from solkit.kernels.common.capability import DeviceCaps, Needs, allowed, cc_text, reasons_against
from solkit.kernels.gemm import gluon
from solkit.kernels.gemm.table import load_config_table
from solkit.tune.space import config_key

#: Bytes the smem estimate adds for mbarriers and the compiler's small scratch.
SMEM_SLACK = 1024
#: The fewest pipeline stages :func:`fit_configs` reduces a config to (below 2 the loads no longer overlap the MMAs).
MIN_STAGES = 2
#: Which family table holds each Triton kernel's tuned list on a GPU.
KERNEL_FAMILY = {"tma_persistent": "hopper", "splitk": "hopper", "pointer": "ampere"}


def elem_bytes(dtype: torch.dtype | str) -> int:
    """Bytes per element of bf16 / fp16 (2) or fp32 (4)."""
    if isinstance(dtype, torch.dtype):
        return dtype.itemsize
    return {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]


def smem_estimate(cfg: dict[str, Any], kernel: str, itemsize: int = 2) -> int:
    """An upper bound on one program's shared memory at ``cfg``: the x and W tiles of ``num_stages`` k-steps, for
    tma_persistent's epilogue one residual piece and one y piece (the output tile over EPI_SUBTILE each), and
    :data:`SMEM_SLACK`. Triton allocates no more for the tuned lists on sm_80-sm_120 (test_gemm_arch.py compiles
    them and compares with ``metadata.shared``); on mma.sync parts it allocates one k-step fewer."""
    bm, bn, bk = int(cfg["BLOCK_M"]), int(cfg["BLOCK_N"]), int(cfg["BLOCK_K"])
    ring = (bm + bn) * bk * itemsize * max(1, int(cfg.get("num_stages", 3)))
    epilogue = 2 * bm * bn * itemsize // int(cfg.get("EPI_SUBTILE", 1)) if kernel == "tma_persistent" else 0
    return ring + epilogue + SMEM_SLACK


def fit_configs(configs: list[dict[str, Any]], kernel: str, itemsize: int, limit: int | None) -> list[dict[str, Any]]:
    """``configs`` that fit ``limit`` bytes of shared memory per program, in their order: one that does not loses
    stages (not below :data:`MIN_STAGES`, or its own count if lower) until it fits, or is dropped; duplicates that
    the reduction makes are dropped. ``limit`` None (the interpreter) keeps every config as it is."""
    if limit is None:
        return [dict(c) for c in configs]
    out, seen = [], set()
    for cfg in configs:
        c = dict(cfg)
        floor = min(MIN_STAGES, int(c.get("num_stages", 3)))
        while smem_estimate(c, kernel, itemsize) > limit and int(c.get("num_stages", 3)) > floor:
            c["num_stages"] = int(c.get("num_stages", 3)) - 1
        key = config_key(c)
        if smem_estimate(c, kernel, itemsize) <= limit and key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _smallest(family: str, regime: str) -> int:
    entry = load_config_table()[family][regime]
    return min(smem_estimate(c, entry["kernel"]) for c in entry["autotune"])


#: Public kernel name -> its paths, fastest first, the portable one last (the contract of every family).
#: ``smem_bytes`` at bf16: gluon_ws's default config; tma_persistent and splitk their smallest tuned config.
PATHS: dict[str, tuple[tuple[str, Needs], ...]] = {
    "gemm": (
        ("gluon_ws", Needs(min_cc=90, max_cc=100, tma=True, wgmma=True, gluon=True,
                           smem_bytes=gluon.DEFAULT_CONFIG.smem_bytes(), note="sm_90a: wgmma, Gluon Hopper ops")),
        ("tma_persistent", Needs(min_cc=90, tma=True, smem_bytes=_smallest("hopper", "prefill"),
                                 note="TMA tensor descriptors; tl.dot lowers per architecture")),
        ("splitk", Needs(min_cc=90, tma=True, smem_bytes=_smallest("hopper", "decode"),
                         note="decode list reads W by TMA descriptors")),
        ("pointer", Needs(note="masked loads: every part and the interpreter")),
    ),
}  # fmt: skip


def allowed_paths(caps: DeviceCaps) -> tuple[set[str], dict[str, list[str]]]:
    """The GEMM paths ``caps`` meets, and why each other one is skipped (portable forcing included). The met set
    comes from :func:`capability.allowed`, which caches it: the dispatcher asks on every call."""
    names = set(allowed(PATHS["gemm"], caps, "gemm"))
    skipped = {name: reasons_against(needs, caps) for name, needs in PATHS["gemm"] if name not in names}
    return names, skipped


@dataclass(frozen=True)
class GemmPlan:
    """What :func:`plan` decided: the kernel, the family table and regime its configs come from, the configs (the
    autotune list as tuned, or fitted to the device's shared memory: ``fit``), whether the list was measured on
    the device's architecture, and why faster paths were skipped."""

    kernel: str
    family: str
    regime: str
    configs: list[dict[str, Any]] = field(compare=False)
    measured: bool
    skipped: dict[str, list[str]] = field(default_factory=dict, compare=False)
    #: None where the table's list is used as it is, else the (shared memory limit, itemsize) it was fitted to
    fit: tuple[int, int] | None = None


def family_configs(family: str, regime: str, caps: DeviceCaps, itemsize: int) -> tuple[list[dict], bool, tuple | None]:
    """(configs, measured on this architecture, fit key) of a family's regime list on ``caps``."""
    table = load_config_table()
    settings, measured = tuned.for_arch(table[family], caps.cc)
    entry = settings[regime]
    if measured or caps.smem_per_block is None:  # as tuned (the interpreter has no limit to fit)
        return entry["autotune"], measured, None
    fitted = fit_configs(entry["autotune"], entry["kernel"], itemsize, caps.smem_per_block)
    return fitted, False, (caps.smem_per_block, itemsize)


def wants_gluon(m: int, n: int, k: int, dtype, aligned: bool, backend: str) -> bool:
    """The Gluon kernel's shape rule (``gluon.try_gemm`` applies the same): bf16/fp16, aligned, K and N multiples
    of 16, and M at least GLUON_MIN_M ("auto") or past the decode regime ("gluon"); never for "triton"."""
    if backend == "triton" or elem_bytes(dtype) != 2 or not aligned or n % 16 or k % 16:
        return False
    return m >= gluon.min_rows(backend, int(load_config_table()["decode_max_m"]) + 1)


def plan(m: int, n: int, k: int, dtype: torch.dtype | str, caps: DeviceCaps, *, aligned: bool = True,
         backend: str = "auto") -> GemmPlan:  # fmt: skip
    """The path, family, regime and configs ``gemm`` takes for [m, k] x [n, k]^T in ``dtype`` on ``caps``.

    ``aligned``: the operands are TMA-addressable (unit inner stride, 16-byte bases and row pitches); fp32 is never
    taken by the TMA kernels. ``backend`` as ``gemm``'s (auto, triton, gluon). SolkitError if no path runs."""
    if caps.cc is not None and caps.cc < (8, 0):
        where = f"{caps.name} is {cc_text(caps.cc)}"
        raise SolkitError(f"gemm: needs compute capability >= 8.0 (bf16 tensor cores); {where}")
    allowed, skipped = allowed_paths(caps)
    regime = "decode" if m <= int(load_config_table()["decode_max_m"]) else "prefill"
    itemsize = elem_bytes(dtype)
    if caps.is_interpreter:
        order = ["pointer"]
    elif regime == "decode":
        order = ["splitk", "pointer"]
    else:
        order = ["tma_persistent", "pointer"] if aligned and itemsize == 2 else ["pointer"]
        if "gluon_ws" in allowed and wants_gluon(m, n, k, dtype, aligned, backend):
            cfg = dict(vars(gluon.DEFAULT_CONFIG))
            return GemmPlan("gluon_ws", "hopper", "prefill", [cfg], True, skipped)
    why: dict[str, list[str]] = dict(skipped)
    for kernel in order:
        if kernel not in allowed:
            continue
        family = "interpreter" if caps.is_interpreter else KERNEL_FAMILY[kernel]
        configs, measured, fit = family_configs(family, regime, caps, itemsize)
        if configs:
            return GemmPlan(kernel, family, regime, configs, measured, skipped, fit)
        why[kernel] = [f"no tuned config fits {caps.smem_per_block} B of shared memory per program"]
    detail = "; ".join(f"{name}: {', '.join(r)}" for name, r in why.items())
    raise SolkitError(f"gemm: no path runs on {caps.name}: {detail}")
