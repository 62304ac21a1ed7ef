"""What each prefill attention path needs of the device (the capability model,
:mod:`solkit.kernels.common.capability`), and the launch settings of a call (``configs.yaml`` through
:mod:`solkit.kernels.common.tuned`, fitted to the device where they were not measured on it).

Paths fastest first, the portable one last. ``tma`` loads Q, K, V and stores O through device-side tensor
descriptors (sm_90 and later); ``portable`` loads with pointers (every part; its 16-bit ``tl.dot`` needs sm_80
for bf16). The backward's ``tma`` path loads K, V, Q and dO of its dK/dV kernel through descriptors, which keeps
K and V in shared memory as the GEMMs' operands (fewer registers: the kernel spills less).
"""

from __future__ import annotations

import functools

from solkit.kernels.common import tuned
from solkit.kernels.common.capability import DeviceCaps, Needs

_FWD = tuned.load("attention", "fwd")
_BWD = tuned.load("attention", "bwd")


def fwd_smem_bytes(cfg: dict, head_dim: int, elem: int = 2) -> int:
    """Shared memory of one forward program: ``num_stages`` K and V tiles in flight and the Q tile."""
    return elem * head_dim * (2 * cfg["num_stages"] * cfg["block_n"] + cfg["block_m"])


def bwd_smem_bytes(cfg: dict, head_dim: int, elem: int = 2) -> int:
    """Shared memory of the larger backward program: ``num_stages`` streamed tiles (Q and dO for dK/dV, K and V
    for dQ) and the two held ones."""
    kv, q = cfg["dkdv"], cfg["dq"]
    return elem * head_dim * max(2 * kv["num_stages"] * kv["block_m"] + 2 * kv["block_n"],
                                 2 * q["num_stages"] * q["block_n"] + 2 * q["block_m"])  # fmt: skip


def _for_head_dim(table: dict, head_dim: int) -> dict:
    dims = sorted(table)
    return dict(table[next((d for d in dims if d >= head_dim), dims[-1])])


def _fit(cfg: dict, budget: int | None, smem) -> dict:
    """``cfg`` with its ``num_stages`` (every level) lowered until ``smem(cfg)`` fits ``budget`` (None: no limit)."""
    if budget is None:
        return cfg
    levels = [c for c in (cfg, cfg.get("dkdv"), cfg.get("dq")) if c and "num_stages" in c]
    while smem(cfg) > budget and any(c["num_stages"] > 1 for c in levels):
        for c in levels:
            c["num_stages"] = max(1, c["num_stages"] - 1)
    return cfg


@functools.cache
def _settings(direction: str, cc: tuple[int, int] | None, smem_per_block: int | None, head_dim: int, elem: int):
    entry, measured = tuned.for_arch(_FWD if direction == "fwd" else _BWD, cc)
    cfg = _for_head_dim(entry["head_dim"], head_dim)
    if direction == "bwd":
        cfg = {k: dict(v) if isinstance(v, dict) else v for k, v in cfg.items()}
    if measured:
        return cfg
    smem = (lambda c: fwd_smem_bytes(c, head_dim, elem)) if direction == "fwd" else (
        lambda c: bwd_smem_bytes(c, head_dim, elem))  # fmt: skip
    return _fit(cfg, smem_per_block, smem)


def settings(direction: str, caps: DeviceCaps, head_dim: int, elem: int) -> dict:
    """Launch settings of ``direction`` (``"fwd"`` or ``"bwd"``) for a call of ``head_dim`` and ``elem``-byte
    elements on ``caps``: the tuned entry's, with ``num_stages`` fitted to the part where not measured there."""
    cfg = _settings(direction, caps.cc, caps.smem_per_block, head_dim, elem)
    return {k: dict(v) if isinstance(v, dict) else v for k, v in cfg.items()}


def _tma_smem() -> int:
    return max(fwd_smem_bytes(c, d) for d, c in _FWD["head_dim"].items())


#: Kernel (launcher direction) -> its paths, fastest first, each with what it needs; the portable path last.
PATHS: dict[str, tuple[tuple[str, Needs], ...]] = {
    "attention_fwd": (
        ("tma", Needs(min_cc=90, tma=True, note="TMA descriptor loads of Q, K, V and store of O")),
        ("portable", Needs(note="pointer loads (bf16 tl.dot: sm_80 and later)")),
    ),
    "attention_bwd": (
        ("tma", Needs(min_cc=90, tma=True, note="TMA descriptor loads of K, V, Q, dO in the dK/dV kernel")),
        ("portable", Needs(note="pointer loads; dK/dV per kv head over its group, then dQ")),
    ),
}  # fmt: skip
