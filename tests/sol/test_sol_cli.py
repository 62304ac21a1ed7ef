import json
import subprocess
import sys

import pytest

from solkit.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_done_when_h100(capsys):
    code, out, _ = run(capsys, "sol", "--flops", "1e12", "--bytes", "1e9", "--dtype", "bf16", "--arch", "h100-sxm",
                       "--json")  # fmt: skip
    assert code == 0
    d = json.loads(out)
    assert d["t_sol_ms"] == pytest.approx(1.011, abs=5e-4) and d["bound"] == "compute"


def test_score_and_tier(capsys):
    code, out, _ = run(capsys, "sol", "--bytes", "4.8e9", "--arch", "h200-sxm", "--time-ms", "2", "--json")
    d = json.loads(out)
    assert d["bound"] == "memory" and d["sol_fraction"] == pytest.approx(0.5)
    assert d["tier"]["name"] == "fuse-and-fix-memory"


def test_violation_flagged(capsys):
    code, out, _ = run(capsys, "sol", "--bytes", "4.8e9", "--arch", "h200-sxm", "--time-ms", "0.5", "--json")
    d = json.loads(out)
    assert d["sol_violation"] is True and d["sol_fraction"] == 1.0


@pytest.mark.parametrize(("argv", "needle"), [
    (["sol", "--flops", "1", "--arch", "nope"], "allowed: a10, a100-pcie-80gb"),
    (["sol", "--flops", "1", "--dtype", "int3", "--arch", "h100-sxm"], "allowed: bf16"),
    (["sol", "--bytes", "-5", "--arch", "h100-sxm"], ">= 0"),
    (["hw", "show", "nope"], "allowed:"),
])  # fmt: skip
def test_bad_input_one_line_exit_2(argv, needle):
    p = subprocess.run([sys.executable, "-m", "solkit.cli", *argv], capture_output=True, text=True)
    assert p.returncode == 2
    assert needle in p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_hw_show_json_has_sources(capsys):
    code, out, _ = run(capsys, "hw", "show", "a100-sxm4-80gb", "--json")
    d = json.loads(out)
    assert d["peaks_tflops"]["bf16_tensor"]["value"] == 312
    assert d["memory_bandwidth_tbs"]["value"] == pytest.approx(2.039)
    assert d["peaks_tflops"]["bf16_tensor"]["url"].startswith("https://")


def test_hw_list_and_detect(capsys):
    code, out, _ = run(capsys, "hw", "list", "--json")
    assert code == 0 and len(json.loads(out)) >= 16
    code, out, _ = run(capsys, "hw", "detect", "--json")
    assert code == 0 and json.loads(out)["kind"] in ("cpu", "cuda")


@pytest.mark.parametrize(
    "flops, expect", [("2*8192*4096*4096", 2 * 8192 * 4096 * 4096), ("4096**2 * 2", 4096**2 * 2), ("1e12", 1e12)]
)
def test_flops_takes_arithmetic(flops, expect, capsys):
    code, out, _ = run(capsys, "sol", "--flops", flops, "--arch", "h200-sxm", "--json")
    assert code == 0 and json.loads(out)["flops"] == expect


@pytest.mark.parametrize(
    "argv",
    [[], ["--flops", "0", "--bytes", "0"], ["--flops", "2**2000"], ["--flops", "x*2"], ["--flops", "__import__('os')"],
     ["--flops", "1/0"], ["--bytes", "1e400"]],
)  # fmt: skip
def test_no_or_nonsense_work_is_one_line(argv):
    p = subprocess.run([sys.executable, "-m", "solkit", "sol", "--arch", "h200-sxm", *argv], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and ("--flops" in p.stderr or "--bytes" in p.stderr)


def test_python_m_solkit_runs():
    r = subprocess.run([sys.executable, "-m", "solkit", "sol", "--bytes", "1e9", "--arch", "h200-sxm", "--json"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0 and '"t_sol_ms"' in r.stdout
