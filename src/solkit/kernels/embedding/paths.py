"""What the embedding kernels' paths need of the device (the capability model,
:mod:`solkit.kernels.common.capability`): plain Triton everywhere. The backward's two paths differ in
determinism, not in needs: ``sorted`` (deterministic, the default) comes first, ``atomic`` (fp32 atomics) is
taken only when asked for (``path="atomic"``)."""

from __future__ import annotations

from solkit.kernels.common.capability import Needs

#: Kernel (launcher direction) -> its paths, fastest first; the portable path last.
PATHS: dict[str, tuple[tuple[str, Needs], ...]] = {
    "embedding_fwd": (("triton", Needs(note="row gather")),),
    "embedding_bwd": (
        ("sorted", Needs(note="stable sort, per-row runs summed in fp32 in token order, zero fill fused")),
        ("atomic", Needs(note="fp32 atomic_add per token row, then a cast")),
    ),
}
