"""Without matplotlib (a minimal install, the GPU machine when its plotting wheels are not carried), a bench report
still writes its JSON, CSV, Markdown and HTML, with a note in place of the figures."""

import json
import sys

from solkit.report.render import write_report


def test_report_without_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    monkeypatch.delitem(sys.modules, "solkit.report.figures", raising=False)
    rows = [{"problem": "rmsnorm", "backend": "eager", "status": "ok", "ms": 2.0, "size": "l", "workload": "w"}]
    paths = write_report({"meta": {"device": {"name": "Test GPU"}, "timing_policy": "test"}, "rows": rows}, tmp_path)
    assert set(paths) == {"json", "csv", "markdown", "html"} and all(p.exists() for p in paths.values())
    notes = json.loads(paths["json"].read_text())["meta"]["notes"]
    assert any(n.startswith("no figures:") and "matplotlib" in n for n in notes)
    assert not list(tmp_path.glob("*.png"))
