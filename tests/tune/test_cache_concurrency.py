"""The tuning cache under concurrent writers: several processes adding to one entry lose no record."""

import json
import subprocess
import sys

import pytest

from solkit.tune.cache import TuneCache, make_key

WRITER = """
import sys
from solkit.tune.cache import TuneCache
key = {key}
cache = TuneCache(sys.argv[1])
for i in range({n}):
    cache.add(key, [{{"config": {{"BLOCK": i, "writer": {w}}}, "status": "ok", "time_ms": 1.0 + i}}])
"""


@pytest.mark.parametrize("writers, per_writer", [(4, 25), (3, 7)])
def test_concurrent_adds_lose_no_record(tmp_path, writers, per_writer):
    key = make_key("k" * 16, {"n": 1000, "m": 7}, ["float16"], env={"device": "cpu", "torch": "x"})
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER.format(key=repr(key), n=per_writer, w=w), str(tmp_path)])
        for w in range(writers)
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    records = TuneCache(tmp_path).load(key)
    assert len(records) == writers * per_writer
    assert {(r["config"]["writer"], r["config"]["BLOCK"]) for r in records.values()} == {
        (w, i) for w in range(writers) for i in range(per_writer)
    }
    files = [p.name for p in (tmp_path / key["kernel"]).iterdir()]
    assert sum(f.endswith(".json") for f in files) == 1  # no temp file left behind
    json.loads(next((tmp_path / key["kernel"]).glob("*.json")).read_text())  # whole, valid JSON
