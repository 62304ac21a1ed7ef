"""What the embedding kernels' paths need of the device (the capability model,
:mod:`solkit.kernels.common.capability`): plain Triton everywhere. The backward's two paths differ in
determinism and structure, not in needs: ``sorted`` (deterministic, the default) comes first; ``dense``
(deterministic, the zero fill fused) and ``atomic`` (fp32 atomics) are taken only when asked for."""

from __future__ import annotations

from solkit.kernels.common.capability import Needs

#: Kernel (launcher direction) -> its paths, fastest first; the portable path last.
PATHS: dict[str, tuple[tuple[str, Needs], ...]] = {
    "embedding_fwd": (("triton", Needs(note="row gather")),),
    "embedding_bwd": (
        ("sorted", Needs(note="memset, stable sort, each id's run summed in fp32 in token order")),
        ("dense", Needs(note="one program per vocabulary row: its run's sum or zeros (zero fill fused)")),
        ("atomic", Needs(note="fp32 atomic_add per token row, then a cast")),
    ),
}
