"""Output helpers shared by every command: JSON for machines, rich tables for people."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

# Wide tables stay readable when piped to a file or a CI log (rich would otherwise assume 80 columns).
console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)


class CommandParser(argparse.ArgumentParser):
    """argparse, but errors are one line with exit code 2 (argparse's own convention)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def jsonable(obj: Any) -> Any:
    """``obj`` with pydantic models dumped, keys as strings, tuples as lists and NaN/Inf as None."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def print_json(obj: Any) -> None:
    """Print ``obj`` as strict JSON (NaN/Inf become null) on stdout."""
    sys.stdout.write(json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n")
    sys.stdout.flush()


def fmt(value: Any, digits: int = 3) -> str:
    """Compact human formatting of numbers for tables."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.{digits}g}"
        return f"{value:.{digits}f}".rstrip("0").rstrip(".") if "." in f"{value:.{digits}f}" else f"{value}"
    return str(value)


def table(
    title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]], caption: str | None = None
) -> Table:
    # Numbers never wrap (a number split over two lines misreads); text folds; a light box and one space of padding
    # keep a 13-column bench table inside a 100-column terminal.
    rows = [list(r) for r in rows]
    t = Table(title=title, caption=caption, header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for i, c in enumerate(columns):
        numeric = bool(rows) and all(isinstance(r[i], (int, float)) or r[i] is None for r in rows if i < len(r))
        t.add_column(c, overflow="fold", no_wrap=numeric, justify="right" if numeric else "left")
    for r in rows:
        t.add_row(*[fmt(v) for v in r])
    return t


def warn(message: str) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {message}", highlight=False)
