"""User-facing errors.

Every error a user can cause (bad input, an unknown arch, a malformed file) is raised as a
:class:`SolkitError`. The CLI prints it as a single line and exits with its code (2 by default),
never with a traceback.
"""

from __future__ import annotations


class SolkitError(Exception):
    """An error caused by user input or environment, reported as one line."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def choices_hint(value: object, allowed: list[str] | tuple[str, ...], what: str) -> str:
    """A one-line message naming the bad value and the allowed ones."""
    return f"unknown {what} {value!r}; allowed: {', '.join(sorted(allowed))}"
