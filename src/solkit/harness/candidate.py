"""The evaluation worker's compile phase: a solution's sources written out and imported (Python) or built
with ``torch.utils.cpp_extension.load`` (C++/CUDA), and :class:`Failure`, the non-PASSED outcome every phase
raises."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from solkit.harness import languages
from solkit.problems.schema import PYTHON_SUFFIXES, Solution


class Failure(Exception):
    """A workload outcome other than PASSED, with its status and reason."""

    def __init__(self, status: str, reason: str, correctness: dict | None = None) -> None:
        super().__init__(reason)
        self.status, self.reason, self.correctness = status, reason, correctness


def load_candidate(sol: Solution, work_dir: Path, device: torch.device, include_dirs: list[str] = ()) -> Callable:
    """Write the solution's sources into ``work_dir/candidate`` and import the entry point (Python) or build
    it with ``torch.utils.cpp_extension.load`` (C++/CUDA; ``include_dirs`` are CUTLASS's, found by the judge);
    any failure is a ``COMPILE_ERROR``, a language whose package is missing one line naming it."""
    candidate_dir = work_dir / "candidate"
    candidate_dir.mkdir(parents=True, exist_ok=True)
    for src in sol.sources:
        path = candidate_dir / src.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(src.content)
    entry = candidate_dir / sol.spec.entry_file
    langs = {lang.value for lang in sol.spec.languages}
    if sol.spec.is_cpp:
        if languages.needs_cutlass(langs, {s.path: s.content for s in sol.sources}) and not include_dirs:
            raise Failure("COMPILE_ERROR", f"CUTLASS headers not found (no $CUTLASS_DIR, no nvidia-cutlass package): "
                          f"{languages.CUTLASS_INSTALL}")  # fmt: skip
        return _build_cpp(sol, candidate_dir, work_dir, device, list(include_dirs))
    if why := languages.missing_package(langs):
        raise Failure("COMPILE_ERROR", why)
    if Path(sol.spec.entry_file).suffix not in PYTHON_SUFFIXES:
        raise Failure("COMPILE_ERROR", f"entry file {sol.spec.entry_file} is not a Python file")
    notes = langs - {"pytorch", "triton", "python"}
    sys.path.insert(0, str(candidate_dir))
    name = f"solkit_candidate_{Path(sol.spec.entry_file).stem}"
    spec = importlib.util.spec_from_file_location(name, entry)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        extra = (
            f" (language {sorted(notes)} is not first-class in solkit: its package must be installed)" if notes else ""
        )
        raise Failure("COMPILE_ERROR", f"import failed: {exc!r}{extra}\n{traceback.format_exc()}") from None
    except Exception as exc:  # noqa: BLE001
        raise Failure("COMPILE_ERROR", f"import failed: {exc!r}\n{traceback.format_exc()}") from None
    fn = getattr(module, sol.spec.entry_symbol, None)
    if not callable(fn):
        raise Failure("COMPILE_ERROR", f"{sol.spec.entry_point}: no callable {sol.spec.entry_symbol!r} in the module")
    return fn


def _build_cpp(sol: Solution, candidate_dir: Path, work_dir: Path, device: torch.device, includes: list[str]):
    from torch.utils import cpp_extension

    files = [candidate_dir / s.path for s in sol.sources if Path(s.path).suffix in (".cu", ".cpp", ".cc", ".cxx", ".c")]
    files = [f for f in files if f.parent == candidate_dir]  # SOL-ExecBench compiles top-level files only
    needs_nvcc = any(f.suffix == ".cu" for f in files) or any(
        lang.value in ("cuda_cpp", "cuda", "cutlass", "cublas", "cudnn") for lang in sol.spec.languages
    )
    nvcc = shutil.which("nvcc") or (
        cpp_extension.CUDA_HOME and os.path.exists(os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc"))
    )
    if needs_nvcc and not nvcc:
        raise Failure("COMPILE_ERROR", "CUDA C++ solution needs nvcc, which is not installed on this machine "
                      "(no nvcc on PATH and no CUDA_HOME)")  # fmt: skip
    if needs_nvcc and device.type != "cuda":
        raise Failure("COMPILE_ERROR", "CUDA C++ solutions need a CUDA device (evaluating on the CPU)")
    opts = sol.spec.compile_options
    cflags = list(opts.cflags) if opts else []
    cuda_cflags = list(opts.cuda_cflags) if opts else []
    ldflags = list(opts.ld_flags) if opts else []
    build = work_dir / "build"
    build.mkdir(parents=True, exist_ok=True)
    try:
        module = cpp_extension.load(
            name=f"solkit_ext_{abs(hash(sol.name)) % 10**8}",
            sources=[str(f) for f in files],
            extra_cflags=cflags,
            extra_cuda_cflags=cuda_cflags,
            extra_ldflags=ldflags,
            extra_include_paths=[str(candidate_dir), *includes],
            build_directory=str(build),
            verbose=False,
        )
    except Exception as exc:  # noqa: BLE001 - build errors of any kind are COMPILE_ERROR
        raise Failure("COMPILE_ERROR", f"build failed: {str(exc)[-4000:]}") from None
    fn = getattr(module, sol.spec.entry_symbol, None) or getattr(module, "run", None)
    if fn is None:
        raise Failure("COMPILE_ERROR", f"built module has no function {sol.spec.entry_symbol!r}")
    return fn
