"""The solkit pytest plugin (entry point ``pytest11: solkit``): the ``sol`` fixture and ``--sol-json``.

``sol(fn, *args, flops=..., bytes=..., dtype=..., problem=..., floor=..., name=...)`` times ``fn(*args)``
with solkit's protocol and scores it against T_SOL (:func:`solkit.testing.scoring.measure`); with
``floor=`` the test fails when the SOL fraction is below it. Every measurement of the session is kept,
summarised at the end of the run and, with ``--sol-json PATH``, written as JSON in the spirit of
pytest-benchmark's ``--benchmark-json``. Pytest loads this module in every run wherever solkit is
installed, so it imports only pytest and the standard library until a test asks for ``sol``.
"""

from __future__ import annotations

import datetime
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

BASES = ("auto", "spec", "calibrated")


class SolViolationWarning(UserWarning):
    """A measured time below T_SOL: the FLOP/byte counts or the timer are wrong."""


class SolSession:
    """The records of one pytest run, and the device's ceilings (looked up once, on first use)."""

    def __init__(self, basis: str) -> None:
        self.basis = basis
        self.records: list[Any] = []
        self.fullnames: list[str] = []
        self._env: tuple | None = None

    def env(self) -> tuple:
        if self._env is None:
            from solkit.testing.scoring import device_ceilings

            self._env = device_ceilings(self.basis)
        return self._env


SESSION_KEY = pytest.StashKey[SolSession]()


class SolFixture:
    """The callable behind the ``sol`` fixture, bound to one test."""

    def __init__(self, state: SolSession, node: pytest.Item) -> None:
        self.state = state
        self.node = node
        self.calls = 0

    def __call__(
        self,
        fn,
        *args: Any,
        flops=None,
        bytes=None,  # noqa: A002 - matches the documented keyword
        dtype=None,
        problem=None,
        workload=None,
        floor: float | None = None,
        name: str | None = None,
        timing: dict[str, Any] | None = None,
    ):
        from solkit.testing.scoring import check_floor, measure

        self.calls += 1
        label = name or (self.node.name if self.calls == 1 else f"{self.node.name}#{self.calls}")
        rec = measure(fn, *args, flops=flops, bytes=bytes, dtype=dtype, problem=problem, workload=workload,
                      name=label, timing=timing, env=self.state.env())  # fmt: skip
        self.state.records.append(rec)
        self.state.fullnames.append(self.node.nodeid + (f"::{name}" if name else ""))
        if rec.violation and floor is None:
            warnings.warn(
                SolViolationWarning(
                    f"{label}: measured {rec.median_ms:.4g} ms is below T_SOL {rec.t_sol_ms:.4g} ms ({rec.basis}); "
                    "scored 1, but the FLOPs/bytes or the timer are wrong"
                ),
                stacklevel=2,
            )
        if floor is not None:
            why = check_floor(rec, floor)
            if why:
                pytest.fail(why, pytrace=False)
        return rec


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("solkit", "solkit speed-of-light measurements (the sol fixture)")
    group.addoption("--sol-json", metavar="PATH", default=None,
                    help="write every sol() measurement of the run to PATH as JSON")  # fmt: skip
    group.addoption("--sol-basis", choices=BASES, default="auto",
                    help="ceilings for T_SOL: auto (the cached calibration, else the datasheet; a CPU is "
                    "always calibrated), spec or calibrated")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SESSION_KEY] = SolSession(config.getoption("sol_basis"))


@pytest.fixture
def sol(request: pytest.FixtureRequest) -> SolFixture:
    """Time a callable with solkit's protocol and score it against T_SOL; ``floor=`` asserts a minimum."""
    return SolFixture(request.config.stash[SESSION_KEY], request.node)


def report(state: SolSession) -> dict[str, Any]:
    """The JSON document of a run's measurements."""
    from solkit import __version__
    from solkit.hardware.calibrate import versions

    info, ceilings, label = state.env()
    benchmarks = []
    for rec, fullname in zip(state.records, state.fullnames):
        d = rec.to_dict()
        d["fullname"] = fullname
        benchmarks.append(d)
    return {
        "solkit_version": __version__,
        "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "versions": versions(),
        "device": info.to_dict(),
        "ceilings": ceilings.to_dict() | {"label": label, "notes": list(ceilings.notes)},
        "benchmarks": benchmarks,
    }


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(SESSION_KEY, None)
    path = session.config.getoption("sol_json")
    if state is None or not path:
        return
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = report(state) if state.records else {"benchmarks": []}
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n")


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    state = config.stash.get(SESSION_KEY, None)
    if state is None or not state.records:
        return
    tr = terminalreporter
    tr.section("solkit sol")
    tr.write_line(f"{'name':40} {'median ms':>11} {'T_SOL ms':>11} {'SOL':>7}  basis")
    for rec in state.records:
        flags = "".join(
            [
                " VIOLATION" if rec.violation else "",
                " noisy" if rec.noisy else "",
                " FAILED floor" if rec.passed is False else "",
            ]
        )
        tr.write_line(
            f"{rec.name[:40]:40} {rec.median_ms:11.4g} {rec.t_sol_ms:11.4g} {rec.sol_fraction:7.1%}  {rec.basis}{flags}"
        )
    path = config.getoption("sol_json")
    if path:
        tr.write_line(f"sol JSON: {path}")
