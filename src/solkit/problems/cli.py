"""``solkit import kernelbench PATH --out DIR``: KernelBench level files -> SOL-ExecBench problem directories."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from solkit.errors import SolkitError
from solkit.output import print_json

HELP = "import KernelBench level files as SOL-ExecBench problem directories"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help=HELP, description=HELP)
    formats = p.add_subparsers(dest="import_format", metavar="FORMAT", required=True, parser_class=type(p))
    kb = formats.add_parser(
        "kernelbench",
        help="KernelBench level files (Model, get_inputs, get_init_inputs)",
        description="Write one SOL-ExecBench problem directory per KernelBench level file: the reference wraps "
        "Model so run(*inputs, *parameters) calls forward; the model's parameters are inputs (their bytes count "
        "in `solkit analyze`); axes are the module-level constants that size the tensors. A file that cannot be "
        "imported is reported in one line and skipped; the exit code is 1 only when nothing was imported.",
    )
    kb.add_argument("path", metavar="PATH", help="a level file, a level directory or KernelBench's root")
    kb.add_argument("--out", required=True, metavar="DIR", help="where the problem directories go (DIR/levelN/...)")
    kb.add_argument("--json", action="store_true", help="print one JSON object per file instead of text")
    kb.set_defaults(func=cmd_import_kernelbench)


def cmd_import_kernelbench(args: argparse.Namespace) -> int:
    from solkit.problems.kernelbench import find_files, import_file

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SolkitError(f"--out {out}: exists and is not a directory")
    files = find_files(Path(args.path))
    if not files:
        raise SolkitError(f"{args.path}: no .py files")
    results = []
    for f in files:
        r = import_file(f, out)
        results.append(r)
        if not args.json:
            if r.error:
                sys.stderr.write(f"skipped: {r.error}\n")
            else:
                sys.stdout.write(f"imported {r.name} -> {r.out}\n")
    ok = sum(r.error is None for r in results)
    if args.json:
        print_json([r.to_dict() for r in results])
    else:
        sys.stdout.write(f"{ok} of {len(results)} files imported into {out}\n")
    return 0 if ok else 1
