"""The ``solkit`` command line.

Each concern registers its own subcommands: a module listed in :data:`COMMAND_MODULES` exposes
``register(subparsers)``, which adds parsers whose ``func`` attribute takes the parsed namespace and
returns an exit code. :data:`COMMANDS` names every command with its module and one-line help, so
``solkit --help``, ``--version`` and a light command like ``hw list`` or ``sol`` import only the module of
the command being run: torch, dynamo and Triton load inside the heavy commands, never before the
arguments are parsed (start-up stays well under half a second; ``tests/test_startup.py`` measures it).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Iterable

from solkit import __version__
from solkit.errors import SolkitError
from solkit.output import CommandParser

#: Every command: its name -> (the module whose ``register`` adds it, its one-line help for ``solkit --help``).
#: tests/test_startup.py checks that each help line equals the one its module registers.
COMMANDS: dict[str, tuple[str, str]] = {
    "hw": ("solkit.hardware.cli", "the hardware database and device detection"),
    "calibrate": ("solkit.hardware.cli", "measure the ceilings this device really reaches (cached)"),
    "sol": ("solkit.sol.cli", "T_SOL, bound and (with --time-ms) SOL fraction and MFU for given FLOPs and bytes"),
    "analyze": (
        "solkit.sol.analyze_cli",
        "derive FLOPs (by math unit), fused/unfused bytes and T_SOL of a problem's reference, per workload",
    ),
    "import": ("solkit.problems.cli", "import KernelBench level files as SOL-ExecBench problem directories"),
    "eval": ("solkit.harness.cli", "evaluate a solution (or the reference) on a SOL-ExecBench problem"),
    "eval-suite": ("solkit.harness.cli", "evaluate every problem under a directory (resumable)"),
    "bench": ("solkit.bench.cli", "the main job: the built-in suite on every backend, a SOL table and report"),
    "report": (
        "solkit.bench.cli",
        "rebuild a report from saved results, or compare results files (same device: times; several "
        "devices: each row's own SOL per device and the spread)",
    ),
    "tune": ("solkit.tune.cli", "search-based autotuning of Triton kernels (live, or replayed on recorded sweeps)"),
    "profile": (
        "solkit.profile.cli",
        "profile a problem's reference/solution under Nsight Compute and explain the gap to SOL",
    ),
    "train-bench": (
        "solkit.train.cli",
        "measure a Llama-style training step (tokens/s, MFU, memory, loss parity) per variant",
    ),
    "model": (
        "solkit.model.cli",
        "the SOL of every operator of a model's training step (Hugging Face config or module:function), measured",
    ),
    "model-compare": (
        "solkit.model.cli",
        "is the top-k by time lost of two `solkit model` runs the same, up to ties measured within each run?",
    ),
    "model-check": (
        "solkit.bench.model_check",
        "time the GEMMs of a `solkit model` run with solkit bench's protocol and compare the SOL fractions",
    ),
}

#: The modules that register commands, in the order of :data:`COMMANDS`.
COMMAND_MODULES = list(dict.fromkeys(module for module, _ in COMMANDS.values()))

log = logging.getLogger("solkit")


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The parser; ``commands`` names the commands whose modules are imported (None: every one).

    A command whose module is not imported still appears in ``solkit --help`` with its help line, through a
    placeholder parser that is never used to parse (only the command on the command line is parsed).
    """
    parser = CommandParser(prog="solkit", description="Speed-of-light analysis, benchmarking and kernels for GPUs.")
    parser.add_argument("--version", action="version", version=f"solkit {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log messages (-vv: debug)")
    parser.add_argument("-q", "--quiet", action="count", default=0, help="fewer log messages (errors only)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    names = set(COMMANDS) if commands is None else set(commands)
    wanted = {COMMANDS[n][0] for n in names if n in COMMANDS}  # a module registers all its commands at once
    loaded: set[str] = set()
    for name, (module_name, help_line) in COMMANDS.items():
        if name in sub.choices:
            continue
        if module_name in wanted and module_name not in loaded:
            loaded.add(module_name)
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as exc:
                if exc.name == module_name:  # this concern has no commands yet
                    continue
                raise
            module.register(sub)
        if name not in sub.choices:
            sub.add_parser(name, help=help_line, add_help=False)
    if "solkit.hardware.cli" in loaded:
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


def command_of(argv: list[str]) -> str | None:
    """The command named on a command line: the first word that is not a top-level option."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def setup_logging(verbose: int, quiet: int) -> None:
    """``-v`` shows solkit's info messages, ``-vv`` debug, ``-q`` errors only; the default is warnings."""
    level = logging.WARNING - 10 * verbose + 10 * quiet
    level = max(logging.DEBUG, min(logging.ERROR, level))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("solkit: %(levelname)s: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(level)
    log.propagate = False


def _exit_now(rc: int) -> None:
    """Leave without the interpreter's teardown: a process that imported torch spends seconds finalising its
    modules at exit (1.5 s on a loaded 2-core machine). Only for a command whose output is all written; the
    streams are flushed here, and the processes it started see their pipes close."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def main(argv: list[str] | None = None) -> int:
    from_command_line = argv is None  # the process is this command: it may leave without the teardown
    argv = sys.argv[1:] if argv is None else list(argv)
    command = command_of(argv)
    parser = build_parser([command] if command else [])
    args = parser.parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    log.debug("solkit %s: %s", __version__, " ".join(argv))
    try:
        rc = int(args.func(args) or 0)
        if from_command_line and getattr(args, "exit_now", False):
            _exit_now(rc)
        return rc
    except SolkitError as exc:
        sys.stderr.write(f"solkit: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("solkit: interrupted\n")
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
