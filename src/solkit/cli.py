"""The ``solkit`` command line.

Each concern registers its own subcommands: a module listed in :data:`COMMAND_MODULES` exposes
``register(subparsers)``, which adds parsers whose ``func`` attribute takes the parsed namespace and
returns an exit code. Modules are imported only when the CLI starts, and a failure in one
command's module never hides the others.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from solkit import __version__
from solkit.errors import SolkitError
from solkit.output import CommandParser

COMMAND_MODULES = [
    "solkit.hardware.cli",  # hw, calibrate
    "solkit.sol.cli",  # sol
    "solkit.sol.analyze_cli",  # analyze
    "solkit.harness.cli",  # eval, eval-suite
    "solkit.bench.cli",  # bench, report
    "solkit.tune.cli",  # tune
    "solkit.profile.cli",  # profile
    "solkit.train.cli",  # train-bench
]


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="solkit", description="Speed-of-light analysis, benchmarking and kernels for GPUs.")
    parser.add_argument("--version", action="version", version=f"solkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # this concern has no commands yet
                continue
            raise
        module.register(sub)
    _register_sections()
    return parser


def _register_sections() -> None:
    # `solkit hw show` lists each kernel's path on the product; the hardware floor cannot import the kernels,
    # so this top floor hands it the section (imported only when `hw show` runs).
    from solkit.hardware.cli import add_show_section

    def kernel_paths(product_id: str):
        from solkit.backends.kernel_paths import hw_show_section

        return hw_show_section(product_id)

    add_show_section("kernel_paths", kernel_paths)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except SolkitError as exc:
        sys.stderr.write(f"solkit: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("solkit: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
