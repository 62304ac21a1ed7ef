"""Regenerate tests/slow_tests.txt: the tests that join the `slow` set by their measured time.

CI (`.ci/run`) must finish within 15 minutes on a 2-core CPU machine. It runs everything but the `slow` set first,
on both cores (pytest-xdist), then the `slow` set in whatever time is left. Tests carry `pytest.mark.slow` where
their slowness is their nature (a hang that must time out, compile pools); the rest of the set is this list: every
test that took longer than the threshold in a measured run of the CPU suite, except those CI must always run
(KEEP: the tutorial, the main job's end-to-end bench, the judge's attack corpus, containment, examples and ground
truth, start-up).
The root conftest.py marks each listed test `slow`.

    python -m pytest -q -m "not slow" --junitxml=/tmp/t.xml   # the measured run (serial, no -n)
    python tools/slow_tests.py /tmp/t.xml [--threshold 3.5]
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "slow_tests.txt"
KEEP = ("tests/test_tutorial.py", "tests/bench/test_bench_cli.py", "tests/harness/test_cheats.py",
        "tests/harness/test_containment.py", "tests/harness/test_examples.py", "tests/harness/test_ground_truth.py",
        "tests/test_startup.py")  # fmt: skip


def node_id(classname: str, name: str) -> str | None:
    """pytest's node id of a junit test case (``tests.a.test_b`` + ``test_c[x]``), where the file exists."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (ROOT / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit", nargs="+", help="junit XML of a serial run of the CPU suite")
    ap.add_argument("--threshold", type=float, default=3.5, help="seconds above which a test joins the slow set")
    args = ap.parse_args(argv)
    slow: dict[str, float] = {}
    for f in args.junit:
        for tc in ET.parse(f).iter("testcase"):
            nid = node_id(tc.get("classname", ""), tc.get("name", ""))
            t = float(tc.get("time", 0) or 0)
            if nid and t > args.threshold and not nid.startswith(KEEP):
                slow[nid] = max(slow.get(nid, 0.0), t)
    head = [f"# Tests slower than {args.threshold:g} s in a serial CPU run (2 cores), marked `slow` by conftest.py.",
            "# Regenerate: python tools/slow_tests.py JUNIT_XML (its docstring says how).",
            "# Seconds measured, then the test's id."]  # fmt: skip
    OUT.write_text("\n".join([*head, *(f"{t:6.1f} {n}" for n, t in sorted(slow.items()))]) + "\n")
    print(f"{len(slow)} tests, {sum(slow.values()):.0f} s -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
