"""The HTML report opens in headless Chromium with every figure decoded and no console errors."""

import shutil
import subprocess

import pytest

from solkit.report.render import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _results():
    rows = []
    for backend, ms in (("eager", 2.0), ("solkit", 1.1)):
        rows.append({"problem": "rmsnorm", "op_type": "rmsnorm", "mode": "fwd", "size": "l", "model": "llama3-8b",
                     "workload": "w", "backend": backend, "status": "ok", "ms": ms, "flops_total": 1.3e8,
                     "fused_bytes": 1.34e8, "sol_spec": 0.5, "sol_calibrated": 0.6, "bound": "memory",
                     "tier": "60-80 %", "advice": "tune", "timing": {"method": "cuda_graph"}})  # fmt: skip
    rows.append({"problem": "softmax", "backend": "liger", "status": "error", "error": "boom <b>", "size": "l"})
    ceil = {"arch": "h200-sxm", "basis": "spec", "flops": {"bf16_tensor": 9.894e14}, "bandwidth": 4.8e12}
    return {"meta": {"device": {"name": "Test GPU"}, "ceilings": {"spec": ceil}, "timing_policy": "test"},
            "rows": rows}  # fmt: skip


def test_report_html_is_self_contained(tmp_path):
    paths = write_report(_results(), tmp_path)
    text = paths["html"].read_text()
    assert "data:image/png;base64," in text and "src='http" not in text
    assert "boom &lt;b&gt;" in text  # errors are escaped


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_report_opens_in_headless_chromium(tmp_path):
    paths = write_report(_results(), tmp_path)
    p = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'prof'}",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom",
         paths["html"].as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert 'data-report-ok="yes"' in p.stdout, p.stdout[:500]
    console_errors = [line for line in p.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    assert not console_errors, console_errors
    assert "Uncaught" not in p.stderr
    dom = p.stdout  # what the browser built: Markdown rendered, the legend drawn, each row's verdict a class
    assert "**" not in dom and "['" not in dom and "arch None" not in dom
    assert 'id="legend"' in dom and "<b>violation</b>" in dom
    assert "<h3>memory-bound rows</h3>" in dom and dom.count("<h2>Tiers and advice</h2>") == 1
    assert '<tr class="ok">' in dom and '<tr class="error">' in dom
