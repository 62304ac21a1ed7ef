"""Runner: summaries (MFU, parity, goals), max-batch search, and the CLI end to end on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from solkit.train import report
from solkit.train.config import get_config
from solkit.train.flops import flops_per_token
from solkit.train.runner import max_batch_search, summarise


def _fake(tps, losses, mem, complete=True, gnorm=2.0, pnorms=None):
    return {
        "grad_norms": [gnorm] * len(losses),
        "param_grad_norms_step0": pnorms or {"a.weight": 1.0, "b.weight": 0.5, "tiny.weight": 1e-6},
        "status": "ok",
        "tokens_per_s_per_rank": tps,
        "losses": losses,
        "activation_checkpointing": False,
        "memory": {"max_allocated_bytes": mem, "max_reserved_bytes": mem},
        "step_time_s": {"median": 16384 / tps, "p10": 16384 / tps, "p90": 16384 / tps},
        "env": {"gpu": "NVIDIA H200", "torch": "x"},
        "variant": {"complete": complete, "swaps": [], "compiled_modules": []},
    }


META = dict(config="llama3-8b-L8", batch=4, seq=4096, dtype="bf16", steps=8, warmup=3, nproc=1, peak_tflops=None,
            gemm_ceiling_flops=700e12)  # fmt: skip


def test_summary_speedups_memory_parity_and_goals():
    base = [11.9, 11.5, 11.0, 10.4]
    results = {
        "eager": _fake(10_000, base, 80e9),
        "compile": _fake(11_000, [v + 0.004 for v in base], 75e9),
        "solkit": _fake(12_000, [v - 0.01 for v in base], 50e9),
        "compile+solkit": _fake(11_500, [11.9, 11.5, 11.6, 11.2], 48e9),  # diverges: trains differently
        "flce": _fake(10_100, base, 52e9),
        "liger": _fake(10_500, base, 60e9, gnorm=2.2),  # same losses, but a 10 % different gradient
        # one parameter's gradient 20 % off: caught even though the total norm and the losses agree
        "wrongw": _fake(10_000, base, 80e9, pnorms={"a.weight": 1.0, "b.weight": 0.6, "tiny.weight": 1e-6}),
        # only a negligible gradient differs (relative to the floor): noise, not a failure
        "noisy": _fake(10_000, base, 80e9, pnorms={"a.weight": 1.0, "b.weight": 0.5, "tiny.weight": 3e-6}),
    }
    s = summarise(results, META)
    assert s["speedups_iso_batch"]["solkit_vs_eager"] == pytest.approx(1.2)
    assert s["goals"]["solkit_vs_eager"]["met"] is True
    assert s["goals"]["solkit_vs_compile"]["met"] is True
    assert s["goals"]["compile+solkit_vs_compile"]["met"] is True
    assert s["goals"]["flce_memory_cut"]["value"] == pytest.approx(0.35)
    assert s["variants"]["solkit"]["parity"]["ok"] is True
    assert s["variants"]["compile+solkit"]["parity"]["ok"] is False
    assert s["variants"]["compile+solkit"]["parity"]["failed_steps"] == [2, 3]
    assert s["goals"]["loss_parity"]["met"] is False
    assert s["variants"]["liger"]["parity"]["ok"] is False
    assert s["variants"]["liger"]["parity"]["first_grad_norm_rel_diff"] == pytest.approx(0.1)
    assert s["variants"]["liger"]["parity"]["checks"]["grad_norm_total_step0"] is False
    wrong = s["variants"]["wrongw"]["parity"]
    assert wrong["ok"] is False and wrong["worst_param"] == "b.weight"
    assert wrong["worst_param_grad_rel_diff"] == pytest.approx(0.2)
    assert s["variants"]["noisy"]["parity"]["ok"] is True
    # MFU: identical numerator across variants, so the MFU ratio is exactly the tokens/s ratio
    cfg = get_config("llama3-8b-L8")
    u = s["variants"]["eager"]["utilisation"]["palm"]
    assert u["mfu_datasheet"] == pytest.approx(10_000 * flops_per_token(cfg, 4096) / 989.4e12, rel=1e-3)
    assert u["mfu_calibrated"] == pytest.approx(10_000 * flops_per_token(cfg, 4096) / 700e12)
    assert "h200" in s["peaks"]["sources"]["datasheet"].lower()
    md = report.markdown(s)
    assert "FAIL" in md and "solkit_vs_eager: 1.200" in md and "NOT met" in md
    assert "<table>" in report.html_section(s)


def test_failed_variant_is_kept_and_reported():
    results = {"eager": _fake(10_000, [11.0, 10.0], 80e9), "solkit": {"status": "oom", "error": "OutOfMemoryError"}}
    s = summarise(results, META)
    assert s["goals"]["solkit_vs_eager"]["value"] is None
    rows = report.rows(s)
    assert rows[1][:2] == ["solkit", "oom"]


@pytest.mark.parametrize(("limit", "start"), [(1, 1), (5, 1), (6, 4), (37, 2), (64, 64)])
def test_max_batch_search_finds_the_largest_fitting_batch(limit, start):
    seen = []

    def probe(b):
        seen.append(b)
        return "ok" if b <= limit else "oom"

    best, log = max_batch_search(probe, start=start, limit=1024)
    assert best == (limit if limit >= start else 0)
    assert len(seen) == len(set(seen))  # no batch probed twice
    assert all((v == "ok") == (b <= limit) for b, v in log.items())


def _cli(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "solkit.cli", "train-bench", *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    from solkit.cli import main

    assert main(["train-bench", "--config", "nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "nope" in err and "tiny" in err
    assert main(["train-bench", "--variants", "turbo", "--out", str(tmp_path)]) == 2
    assert "turbo" in capsys.readouterr().err
    assert main(["train-bench", "--steps", "0", "--out", str(tmp_path)]) == 2


def test_cli_trains_tiny_on_cpu_and_writes_reports(tmp_path):
    r = _cli("--config", "tiny", "--variants", "eager", "--steps", "2", "--warmup", "1", "--seq", "16", "--batch",
             "1", "--device", "cpu", "--json", "--out", str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads(r.stdout)
    eager = s["variants"]["eager"]
    assert eager["status"] == "ok" and len(eager["losses"]) == 3 and len(eager["step_times_s"]) == 2
    assert eager["tokens_per_s_per_rank"] > 0 and eager["parity"]["ok"]
    assert s["command"].startswith("solkit train-bench")
    for ext in ("json", "md", "html"):
        assert (tmp_path / f"train_tiny.{ext}").stat().st_size > 100


@pytest.mark.slow
def test_cli_data_parallel_gloo_two_processes(tmp_path):
    r = _cli("--config", "tiny", "--variants", "eager", "--steps", "1", "--warmup", "1", "--seq", "16", "--batch",
             "1", "--device", "cpu", "--nproc", "2", "--json", "--out", str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads(r.stdout)
    assert s["variants"]["eager"]["world_size"] == 2 and s["variants"]["eager"]["parallel"] == "ddp"
    assert s["scaling"]["eager"]["efficiency"] > 0


@pytest.mark.parametrize(
    ("flag", "value"), [("--budget", "-1"), ("--budget", "0"), ("--budget", "nan"), ("--timeout", "inf"),
                        ("--lr", "-0.1"), ("--peak-tflops", "0")],
)  # fmt: skip
def test_cli_nonsense_numbers_are_one_line_exit_2_and_write_nothing(flag, value, tmp_path, capsys):
    from solkit.train.cli import main

    assert main([flag, value, "--device", "cpu", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert flag in err and "finite number > 0" in err and err.count("\n") == 1
    assert not any(tmp_path.iterdir())  # an earlier result in --out is not overwritten
