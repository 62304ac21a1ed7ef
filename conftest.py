"""Root pytest setup, for tests/ and lab/tests/ alike: the tests listed in tests/slow_tests.txt join the `slow`
set (tools/slow_tests.py says why and regenerates the list)."""

from __future__ import annotations

from pathlib import Path

import pytest

_LISTED = Path(__file__).parent / "tests" / "slow_tests.txt"


def _slow_ids() -> set[str]:
    if not _LISTED.is_file():
        return set()
    return {line.split(None, 1)[1].strip() for line in _LISTED.read_text().splitlines()
            if line.strip() and not line.startswith("#")}  # fmt: skip


def pytest_collection_modifyitems(config, items):
    listed = _slow_ids()
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
