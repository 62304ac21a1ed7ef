"""What each SOL-ExecBench solution language needs beyond torch, and the one line that says so when it is missing.

SOL-ExecBench's Docker image ships every language's toolchain; solkit is pip-installed, so the packages come
from the index as extras (``pip install 'solkit[cutlass]'`` ...) and a solution whose language lacks its
package is a ``COMPILE_ERROR`` naming the package and the install command, never an import traceback.

* ``cutlass`` (C++): CUTLASS's headers, from ``$CUTLASS_DIR`` (a CUTLASS checkout, as SOL-ExecBench's image
  sets it) or the ``nvidia-cutlass`` package, which ships them under ``cutlass_library/source``;
* ``cute_dsl``: the ``nvidia-cutlass-dsl`` package (module ``cutlass``);
* ``cutile``: the ``cuda-tile`` package (module ``cuda.tile``);
* ``cudnn_frontend``: ``nvidia-cudnn-frontend`` (module ``cudnn``); ``tilelang``: ``tilelang``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

#: language -> (module it imports, the package on the index, the install command)
PYTHON_PACKAGES: dict[str, tuple[str, str, str]] = {
    "cute_dsl": ("cutlass", "nvidia-cutlass-dsl", "pip install 'solkit[cute-dsl]'"),
    "cutile": ("cuda.tile", "cuda-tile", "pip install 'solkit[cutile]'"),
    "cudnn_frontend": ("cudnn", "nvidia-cudnn-frontend", "pip install nvidia-cudnn-frontend"),
    "tilelang": ("tilelang", "tilelang", "pip install tilelang"),
}
CUTLASS_INSTALL = "pip install 'solkit[cutlass]' (or: pip install nvidia-cutlass --no-deps, headers only)"


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        return False


def missing_package(languages: set[str]) -> str | None:
    """One line naming the first language whose package is not installed, with the install command; else None."""
    for lang in sorted(languages):
        if lang in PYTHON_PACKAGES:
            module, package, command = PYTHON_PACKAGES[lang]
            if not _has_module(module):
                return f"language {lang} needs the package {package} (module {module}), not installed: {command}"
    return None


def cutlass_include_dirs() -> list[str]:
    """CUTLASS's include directories (``include`` and ``tools/util/include``): ``$CUTLASS_DIR``, else the
    ``nvidia-cutlass`` package's copy; empty when neither is there."""
    roots = []
    if os.environ.get("CUTLASS_DIR"):
        roots.append(Path(os.environ["CUTLASS_DIR"]))
    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        roots += [Path(p) / "source" for p in spec.submodule_search_locations]
    for root in roots:
        if (root / "include" / "cutlass" / "cutlass.h").is_file():
            return [str(root / "include"), str(root / "tools" / "util" / "include")]
    return []


def needs_cutlass(languages: set[str], sources: dict[str, str]) -> bool:
    """A C++ solution needs CUTLASS when it says so or includes a ``cutlass/`` or ``cute/`` header."""
    return "cutlass" in languages or any(
        '#include "cutlass/' in text or "#include <cutlass/" in text or "#include <cute/" in text
        for text in sources.values()
    )


def status() -> dict[str, str]:
    """Each language's availability on this machine, for ``docs`` and the GPU job's record."""
    out = {lang: "installed" if _has_module(m) else f"missing: {cmd}" for lang, (m, _, cmd) in PYTHON_PACKAGES.items()}
    dirs = cutlass_include_dirs()
    out["cutlass"] = f"headers in {dirs[0]}" if dirs else f"missing: {CUTLASS_INSTALL}"
    return out
