# ruff: noqa
"""Raises SystemExit from run() (not an Exception subclass)."""


def run(x, weight):
    raise SystemExit(0)
