"""`solkit bench --profile` wiring: every measured row goes to one ncu batch with the bench's own time."""

from solkit.bench import cli


def test_every_measured_row_is_profiled_with_its_time(monkeypatch, tmp_path):
    seen = {}

    def fake_batch(items, out_dir=None, timeout_s=900):
        seen["items"], seen["out"] = items, out_dir
        return [{"summary": f"diag {i}", "roof": "memory", "degraded": ["no ncu: x"]} for i in range(len(items))]

    import solkit.profile.bench_hook as hook

    monkeypatch.setattr(hook, "diagnose_batch_for_bench", fake_batch)
    rows = [
        {"problem": "rmsnorm", "backend": "eager", "status": "ok", "ms": 0.4, "workload": "w1"},
        {"problem": "rmsnorm", "backend": "solkit", "status": "ok", "ms": 0.035, "workload": "w1"},
        {"problem": "rope", "backend": "liger", "status": "incorrect", "ms": None, "workload": "w2"},
    ]
    results, notes = {"rows": rows}, []
    cli._add_diagnoses(results, notes, tmp_path)
    items = seen["items"]
    assert [i["solution"] for i in items] == [None, "bench:solkit"]
    assert [i["t_measured_ms"] for i in items] == [0.4, 0.035]
    assert items[0]["problem_dir"].endswith("suite/rmsnorm")
    assert rows[0]["profile_diagnosis"] == "diag 0" and rows[1]["profile_diagnosis"] == "diag 1"
    assert "profile_diagnosis" not in rows[2]
    assert notes == ["--profile degraded: no ncu: x"]
