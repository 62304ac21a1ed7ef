#!/usr/bin/env python3
"""Write a smaller copy of a wheel: drop the paths a job does not need, optionally strip the ELF files and
compress with LZMA, and regenerate ``RECORD`` so that pip installs it like the original.

The device's carry limit (64 MiB for the whole working tree) is below some wheels (ray 2.60: 79 MB). A wheel
is a zip archive that pip reads with Python's ``zipfile``, which reads LZMA members as well as deflated ones,
so ``--compression lzma`` gives a wheel that pip installs unchanged; the binaries of ray compress about a
third better that way. ``--strip`` runs ``strip --strip-unneeded`` on each ELF member (their symbol tables
are for debuggers; the dynamic symbols stay).

    python3 tools/slim_wheel.py ray-2.60.0-cp312-*.whl .whl_ray --preset ray
    python3 tools/slim_wheel.py some.whl out/ --drop 'pkg/tests/' --drop 'pkg/*.pyi' --strip

A pattern ending in ``/`` drops everything under that folder; any other pattern is an ``fnmatch`` glob over
the member's path inside the wheel (``*`` crosses ``/``). ``--keep`` patterns win over ``--drop``. The
``.dist-info`` files other than ``RECORD`` are always kept; signatures of the old ``RECORD`` are dropped.
Members keep their order, dates and permission bits, so the same input and options give the same output.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# What a local Ray pool (``ray.init`` on one host: GCS, raylet, core workers, the runtime-env and dashboard
# agents the raylet starts) does not load: the Java and C++ APIs, the dashboard's web client, the libraries
# on top of Ray Core, and the tests. Found by dropping and running ``ray.init(num_cpus=2)`` plus
# the Ray tests of tests/scale/test_commands.py against the result (docs/scale.md).
PRESETS = {
    "ray": {
        "drop": [
            "ray/jars/",
            "ray/cpp/",
            "ray/dashboard/client/",
            "ray/rllib/",
            "ray/serve/",
            "ray/tune/",
            "ray/train/",
            "ray/data/",
            "ray/air/",
            "ray/llm/",
            "ray/workflow/",
            "ray/util/spark/",
            "ray/tests/",
            "*/tests/*",
            "*.pyi",
            "*.js.map",
        ],
        "keep": [],
        "strip": True,
        "compression": "lzma",
    },
}
COMPRESSION = {"deflate": zipfile.ZIP_DEFLATED, "lzma": zipfile.ZIP_LZMA, "stored": zipfile.ZIP_STORED}


class UsageError(Exception):
    """One line for the user, exit 2."""


def matches(path: str, patterns: list[str]) -> bool:
    return any(path.startswith(p) if p.endswith("/") else fnmatch.fnmatchcase(path, p) for p in patterns)


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def strip_elf(data: bytes, strip: str) -> bytes:
    """``data`` through ``strip --strip-unneeded``; unchanged when it is not an ELF file."""
    if not data.startswith(b"\x7fELF"):
        return data
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "in"), Path(tmp, "out")
        src.write_bytes(data)
        done = subprocess.run([strip, "--strip-unneeded", "-o", str(dst), str(src)], capture_output=True, text=True)
        if done.returncode != 0:
            raise UsageError(f"strip failed: {(done.stderr or done.stdout).strip().splitlines()[0]}")
        return dst.read_bytes()


def dist_info(names: list[str], wheel: Path) -> str:
    found = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info") and n.endswith("/RECORD")}
    if len(found) != 1:
        raise UsageError(f"{wheel}: not a wheel (no single .dist-info/RECORD)")
    return found.pop()


def slim(wheel: Path, out_dir: Path, drop: list[str], keep: list[str], strip: bool, compression: str) -> dict:
    """Write the slimmed wheel into ``out_dir`` (same file name); sizes before and after."""
    strip_tool = shutil.which("strip") if strip else None
    if strip and strip_tool is None:
        raise UsageError("--strip needs binutils' strip on PATH")
    try:
        src = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise UsageError(f"{wheel}: cannot read the wheel ({exc})") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel.name
    if target.resolve() == wheel.resolve():
        raise UsageError(f"{out_dir}: the output would overwrite the input wheel")
    with src:
        infos = src.infolist()
        meta = dist_info([i.filename for i in infos], wheel)
        record_name = f"{meta}/RECORD"
        kept, dropped, records = 0, 0, []
        before = {"wheel_bytes": wheel.stat().st_size, "files": 0, "unpacked_bytes": 0}
        after = {"files": 0, "unpacked_bytes": 0}
        tmp_target = target.with_suffix(".tmp")
        with zipfile.ZipFile(tmp_target, "w", compression=COMPRESSION[compression]) as dst:
            for info in infos:
                name = info.filename
                if info.is_dir():
                    continue
                before["files"] += 1
                before["unpacked_bytes"] += info.file_size
                if name == record_name or name in (f"{meta}/RECORD.jws", f"{meta}/RECORD.p7s"):
                    continue
                if not name.startswith(meta + "/") and matches(name, drop) and not matches(name, keep):
                    dropped += 1
                    continue
                data = src.read(info)
                if strip_tool:
                    data = strip_elf(data, strip_tool)
                new = zipfile.ZipInfo(name, date_time=info.date_time)
                new.external_attr, new.compress_type = info.external_attr, COMPRESSION[compression]
                dst.writestr(new, data)
                records.append(record_line(name, data))
                kept += 1
                after["files"] += 1
                after["unpacked_bytes"] += len(data)
            records.append(f"{record_name},,")
            rec = zipfile.ZipInfo(record_name, date_time=infos[-1].date_time)
            rec.external_attr, rec.compress_type = 0o644 << 16, COMPRESSION[compression]
            dst.writestr(rec, "\n".join(records) + "\n")
        os.replace(tmp_target, target)
    after["wheel_bytes"] = target.stat().st_size
    return {"wheel": str(target), "kept": kept, "dropped": dropped, "before": before, "after": after}


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("wheel", type=Path, help="the wheel to slim")
    ap.add_argument("out_dir", type=Path, help="folder for the slimmed wheel (same file name)")
    ap.add_argument("--drop", action="append", default=[], metavar="GLOB", help="paths to leave out (repeatable)")
    ap.add_argument("--keep", action="append", default=[], metavar="GLOB", help="paths kept even if dropped")
    ap.add_argument("--strip", action="store_true", help="strip --strip-unneeded every ELF member")
    ap.add_argument("--compression", choices=sorted(COMPRESSION), default=None, help="default: deflate")
    ap.add_argument("--preset", choices=sorted(PRESETS), help="a known package's patterns, strip and compression")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    drop, keep, strip, compression = list(args.drop), list(args.keep), args.strip, args.compression
    if args.preset:
        preset = PRESETS[args.preset]
        drop, keep = preset["drop"] + drop, preset["keep"] + keep
        strip = strip or preset["strip"]
        compression = compression or preset["compression"]
    try:
        if not args.wheel.is_file() or args.wheel.suffix != ".whl":
            raise UsageError(f"{args.wheel}: no such wheel")
        if not (drop or strip or compression):
            raise UsageError("nothing to do: give --drop, --strip, --compression or --preset")
        res = slim(args.wheel, args.out_dir, drop, keep, strip, compression or "deflate")
    except UsageError as exc:
        print(f"slim_wheel: {exc}", file=sys.stderr)
        return 2
    b, a = res["before"], res["after"]
    print(f"{args.wheel.name}: {b['wheel_bytes']:,} -> {a['wheel_bytes']:,} bytes "
          f"({a['wheel_bytes'] / b['wheel_bytes']:.1%}); files {b['files']} -> {a['files']} "
          f"({res['dropped']} dropped); unpacked {b['unpacked_bytes']:,} -> {a['unpacked_bytes']:,} bytes")  # fmt: skip
    print(f"wrote {res['wheel']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
