"""Every SOL-ExecBench solution language: a missing package is one line naming it and the install command."""

import pytest
import torch

from solkit.harness import languages
from solkit.harness.candidate import Failure, load_candidate
from solkit.problems.schema import Solution


def _solution(lang: str, path: str, content: str) -> Solution:
    return Solution.model_validate({
        "name": f"s_{lang}", "definition": "d", "author": "t",
        "spec": {"languages": [lang], "entry_point": f"{path}::run", "destination_passing_style": False},
        "sources": [{"path": path, "content": content}],
    })  # fmt: skip


@pytest.mark.parametrize(
    "lang,package,module,extra",
    [
        ("cute_dsl", "nvidia-cutlass-dsl", "cutlass", "solkit[cute-dsl]"),
        ("cutile", "cuda-tile", "cuda.tile", "solkit[cutile]"),
        ("cudnn_frontend", "nvidia-cudnn-frontend", "cudnn", "nvidia-cudnn-frontend"),
    ],
)
def test_missing_python_language_package_is_one_compile_error_line(tmp_path, monkeypatch, lang, package, module, extra):
    monkeypatch.setattr(languages, "_has_module", lambda name: name != module)
    with pytest.raises(Failure) as err:
        load_candidate(_solution(lang, "kernel.py", f"import {module}\ndef run(x):\n    return x\n"), tmp_path,
                       torch.device("cpu"))  # fmt: skip
    assert err.value.status == "COMPILE_ERROR" and "\n" not in err.value.reason
    assert package in err.value.reason and extra in err.value.reason and "pip install" in err.value.reason
    assert languages.status()[lang].startswith("missing: pip install")


def test_installed_language_package_is_imported(tmp_path, monkeypatch):
    monkeypatch.setattr(languages, "_has_module", lambda name: True)
    fn = load_candidate(_solution("cute_dsl", "kernel.py", "def run(x):\n    return x + 1\n"), tmp_path,
                        torch.device("cpu"))  # fmt: skip
    assert fn(1) == 2


@pytest.mark.parametrize(
    "lang,source",
    [
        ("cutlass", "int run() { return 0; }\n"),
        ("cuda_cpp", '#include "cutlass/gemm/device/gemm.h"\nint run() { return 0; }\n'),
        ("cuda_cpp", "#include <cute/tensor.hpp>\nint run() { return 0; }\n"),
    ],
)
def test_cutlass_without_headers_is_one_line(tmp_path, lang, source):
    with pytest.raises(Failure) as err:
        load_candidate(_solution(lang, "main.cpp", source), tmp_path, torch.device("cpu"), include_dirs=[])
    assert err.value.status == "COMPILE_ERROR" and "\n" not in err.value.reason
    assert "CUTLASS headers not found" in err.value.reason and "nvidia-cutlass" in err.value.reason


def test_cutlass_headers_from_cutlass_dir_or_the_package(tmp_path, monkeypatch):
    root = tmp_path / "cutlass"
    (root / "include" / "cutlass").mkdir(parents=True)
    (root / "include" / "cutlass" / "cutlass.h").write_text("// header\n")
    monkeypatch.setenv("CUTLASS_DIR", str(root))
    assert languages.cutlass_include_dirs() == [str(root / "include"), str(root / "tools" / "util" / "include")]
    pkg = tmp_path / "site" / "cutlass_library"  # the nvidia-cutlass wheel's layout
    (pkg / "source" / "include" / "cutlass").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "source" / "include" / "cutlass" / "cutlass.h").write_text("// header\n")
    monkeypatch.delenv("CUTLASS_DIR")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert languages.cutlass_include_dirs()[0] == str(pkg / "source" / "include")
    assert languages.needs_cutlass({"cuda_cpp"}, {"k.cu": "#include <cutlass/numeric_types.h>\n"})
    assert not languages.needs_cutlass({"cuda_cpp"}, {"k.cu": "#include <cuda_runtime.h>\n"})
