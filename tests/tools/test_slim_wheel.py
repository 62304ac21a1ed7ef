"""tools/slim_wheel.py on a toy wheel: dropped paths are gone, the rest is byte-identical (or stripped), RECORD
lists every member with its true hash and size, permission bits survive, and bad input is one line, exit 2."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import shutil
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("slim_wheel", ROOT / "tools" / "slim_wheel.py")
slim_wheel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(slim_wheel)

FILES = {
    "toy/__init__.py": b"x = 1\n",
    "toy/core/bin/server": b"#!/bin/sh\necho hi\n",
    "toy/jars/big.jar": b"J" * 5000,
    "toy/extra/mod.py": b"y = 2\n",
    "toy/extra/keep_me.py": b"z = 3\n",
    "toy/sub/tests/test_a.py": b"assert 1\n",
    "toy/types.pyi": b"x: int\n",
    "toy-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: toy\nVersion: 1.0\n",
    "toy-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
}


def _wheel(tmp: Path, elf: bytes | None = None) -> Path:
    path = tmp / "toy-1.0-py3-none-any.whl"
    files = dict(FILES, **({"toy/native.so": elf} if elf else {}))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith("server") else 0o644) << 16
            z.writestr(info, data)
        z.writestr("toy-1.0.dist-info/RECORD", "stale,,\n")
    return path


def _record(z: zipfile.ZipFile) -> dict[str, tuple[str, str]]:
    lines = z.read("toy-1.0.dist-info/RECORD").decode().splitlines()
    return {p: (h, s) for p, h, s in (line.rsplit(",", 2) for line in lines)}


@pytest.mark.parametrize("compression", ["deflate", "lzma"])
def test_drops_keeps_and_records(tmp_path, compression, capsys):
    src = _wheel(tmp_path)
    argv = [str(src), str(tmp_path / "out"), "--drop", "toy/jars/", "--drop", "toy/extra/", "--drop", "*/tests/*",
            "--drop", "*.pyi", "--keep", "toy/extra/keep_*", "--compression", compression]  # fmt: skip
    assert slim_wheel.main(argv) == 0
    assert "dropped" in capsys.readouterr().out
    with zipfile.ZipFile(tmp_path / "out" / src.name) as z:
        names = set(z.namelist())
        kept = {"toy/__init__.py", "toy/core/bin/server", "toy/extra/keep_me.py", "toy-1.0.dist-info/METADATA",
                "toy-1.0.dist-info/WHEEL"}  # fmt: skip
        assert names == kept | {"toy-1.0.dist-info/RECORD"}
        record = _record(z)
        assert set(record) == names and record["toy-1.0.dist-info/RECORD"] == ("", "")
        for name in kept:
            data = z.read(name)
            assert data == FILES[name]
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert record[name] == (f"sha256={digest}", str(len(data)))
        assert z.getinfo("toy/core/bin/server").external_attr >> 16 == 0o755
        want = zipfile.ZIP_LZMA if compression == "lzma" else zipfile.ZIP_DEFLATED
        assert all(i.compress_type == want for i in z.infolist())
    argv[1] = str(tmp_path / "again")
    assert slim_wheel.main(argv) == 0  # the same input and options give the same bytes
    assert (tmp_path / "again" / src.name).read_bytes() == (tmp_path / "out" / src.name).read_bytes()


@pytest.mark.skipif(shutil.which("strip") is None, reason="needs binutils' strip")
def test_strip_shrinks_an_elf_member(tmp_path):
    elf = Path(shutil.which("strip")).read_bytes()  # any ELF file with a symbol table will do
    src = _wheel(tmp_path, elf=elf)
    assert slim_wheel.main([str(src), str(tmp_path / "out"), "--strip"]) == 0
    with zipfile.ZipFile(tmp_path / "out" / src.name) as z:
        data = z.read("toy/native.so")
        assert data.startswith(b"\x7fELF") and len(data) <= len(elf)
        assert z.read("toy/__init__.py") == FILES["toy/__init__.py"]  # not an ELF file: untouched
        assert _record(z)["toy/native.so"][1] == str(len(data))


@pytest.mark.parametrize(
    "make, extra, words",
    [
        (lambda t: t / "missing.whl", ["--drop", "x"], "no such wheel"),
        (lambda t: (t / "bad.whl").write_bytes(b"not a zip") and t / "bad.whl", ["--drop", "x"], "cannot read"),
        (lambda t: _wheel(t), [], "nothing to do"),
    ],
)
def test_bad_input_is_one_line(tmp_path, make, extra, words, capsys):
    assert slim_wheel.main([str(make(tmp_path)), str(tmp_path / "out"), *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
