"""Which path each of solkit's public kernels takes on a product, and why the faster ones were skipped.

This is the kernels' section of ``solkit hw show ID``. It lives above the kernels (the hardware floor must not
import them); the top-level CLI registers :func:`hw_show_section` with ``solkit.hardware.cli``.
"""

from __future__ import annotations

from typing import Any

from solkit.errors import SolkitError
from solkit.hardware.cli import ShowSection


def paths_on_product(product_id: str) -> dict[str, dict[str, Any]]:
    """``{kernel: {"path": chosen or None, "skipped": {path: [reasons]}}}`` on a hardware-database product,
    from the capability model (:func:`solkit.kernels.kernel_paths` on the product's capabilities)."""
    from solkit.kernels import caps_for_product, kernel_paths

    return kernel_paths(caps_for_product(product_id))


def skipped_text(skipped: dict[str, list[str]]) -> str:
    """One line per skipped path: ``path: reason; reason``."""
    return "\n".join(f"{name}: {'; '.join(reasons)}" for name, reasons in skipped.items())


def hw_show_section(product_id: str) -> ShowSection:
    """The ``hw show`` section: kernel, chosen path, faster paths skipped and why (``--json``: the mapping)."""
    try:
        described = paths_on_product(product_id)
    except SolkitError as exc:  # e.g. an AMD product: the capability model covers NVIDIA GPUs only
        return ShowSection("kernel_paths", "kernel paths", [], [], {"error": str(exc)},
                           notes=[f"kernel paths: {exc}"])  # fmt: skip
    rows = []
    for kernel, d in described.items():
        chosen = d.get("path") or f"none: {d.get('error', 'no path runs here')}"
        rows.append([kernel, chosen, skipped_text(d.get("skipped") or {}) or "-"])
    return ShowSection(
        "kernel_paths",
        f"kernel paths on {product_id} (capability model)",
        ["kernel", "path taken", "faster paths skipped: why"],
        rows,
        described,
        caption="from each family's PATHS and the product's database record; no device was run "
        "(SOLKIT_KERNEL_PATH=portable forces the portable path)",
    )
