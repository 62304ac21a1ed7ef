"""Every public kernel's paths and what each needs of the device, gathered from the families' ``PATHS`` (the
capability model, :mod:`solkit.kernels.common.capability`), and which path each kernel takes on a device: what
``solkit hw show`` lists per product and the compile checks build on.

A kernel is one launcher direction (``"softmax_fwd"``, ``"rmsnorm_bwd"``, ...); its paths are fastest first, the
portable Triton path last. :func:`describe` answers with :func:`~solkit.kernels.common.capability.choose`: the
fastest path whose needs the device meets (a dispatcher's own shape rules then pick among the allowed ones, so a
narrow row may still take a slower path than the one named here), and why each faster path was skipped.
"""

from __future__ import annotations

import importlib

from solkit.errors import SolkitError
from solkit.kernels.common.capability import DeviceCaps, Needs, choose, unmet

#: The families, by module name (``solkit.kernels.softmax`` the attribute is the softmax function, not the package).
FAMILIES = ("gemm", "softmax", "cross_entropy", "norms", "rope", "gates", "embedding", "attention")


def all_paths() -> dict[str, tuple[tuple[str, Needs], ...]]:
    """Kernel name -> its paths (fastest first, each with its needs), over every family."""
    out: dict[str, tuple[tuple[str, Needs], ...]] = {}
    for family in FAMILIES:
        for kernel, paths in importlib.import_module(f"solkit.kernels.{family}").PATHS.items():
            if kernel in out:
                raise SolkitError(f"kernel paths: {kernel!r} is declared by two families")
            out[kernel] = tuple(paths)
    return out


def describe(caps: DeviceCaps) -> dict[str, dict]:
    """Kernel name -> ``{"path": the path chosen on caps, "skipped": {faster path: [reasons]}}``. A kernel that no
    path of which runs there gets ``"path": None``, every path's reasons, and ``"reason"``: one line saying so."""
    out: dict[str, dict] = {}
    for kernel, paths in all_paths().items():
        try:
            name, skipped = choose(paths, caps)
            out[kernel] = {"path": name, "skipped": skipped}
        except SolkitError as e:
            out[kernel] = {"path": None, "skipped": {n: unmet(nd, caps) for n, nd in paths}, "reason": f"{kernel}: {e}"}
    return out
