"""train-bench --hf: the Hugging Face variants (eager, patch, ... ) end to end on a CPU, their goals and the
step-0 per-parameter gradient check."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")

from solkit.train import report  # noqa: E402
from solkit.train.hf import GOALS, HF_VARIANTS, compile_hf, grad_check, summary_parts  # noqa: E402
from solkit.train.runner import summarise  # noqa: E402


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "solkit.cli", "train-bench", *args], capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def test_hf_llama_trains_patched_on_cpu_checked_against_eager(tmp_path):
    # one variant process: its step 0 is checked against eager's, run by the same worker before the patch
    p = _cli("--hf", "llama", "--layers", "1", "--seq", "8", "--batch", "1", "--steps", "1", "--warmup", "1",
             "--device", "cpu", "--variants", "patch", "--out", str(tmp_path), "--json")  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads(p.stdout)
    assert s["hf"] == {"family": "llama", "preset": "tiny", "layers": 1}
    assert s["config"]["layers"] == 1 and s["config"]["name"] == "hf-llama-tiny-L1"
    patched = s["variants"]["patch"]
    assert patched["status"] == "ok", patched.get("error")
    assert patched["variant"]["complete"] and patched["variant"]["patch_report"]["counts"]["fused_linear_ce"] == 1
    assert all(sw["status"] == "ok" for sw in patched["variant"]["swaps"])
    assert len(patched["losses"]) == 2 and patched["losses"][1] < patched["losses"][0]
    check = patched["grad_check_step0"]
    assert check["ok"] and not check["flagged"] and check["worst_value"] < 1e-3
    assert set(check["max_rel_err"]) == set(patched["param_grad_norms_step0"])  # every parameter tensor
    assert s["goals"]["gradients_checked_step0"]["met"] is True
    assert s["goals"]["gradients_checked_step0"]["step0_loss_abs_diff"]["patch"] < 1e-5
    md = (tmp_path / "train_hf_llama_tiny.md").read_text()
    assert "patch_vs_eager ≥ 1.2: not measured" in md and "step-0 gradients vs eager" in md


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hf", "llama", "--variants", "solkit"], "unknown --hf variant 'solkit'"),
        (["--preset", "llama3-8b"], "go with --hf"),
        (["--hf", "llama", "--nproc", "2"], "--nproc must be 1"),
        (["--hf", "llama", "--layers", "0"], "--layers must be >= 1"),
    ],
)
def test_hf_flags_are_checked_before_any_work(args, message, tmp_path, capsys):
    from solkit.train.cli import main

    assert main([*args, "--device", "cpu", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def _fake(tps: float, mem: float, losses: list[float], flagged: list[str] | None = None, breaks: int = 0) -> dict:
    return {
        "status": "ok", "tokens_per_s_per_rank": tps, "losses": losses, "grad_norms": [1.0] * len(losses),
        "param_grad_norms_step0": {"w": 1.0}, "activation_checkpointing": False, "graph_breaks": breaks,
        "memory": {"max_allocated_bytes": mem, "max_reserved_bytes": mem}, "env": {"gpu": "NVIDIA H200"},
        "step_time_s": {"median": 1.0, "p10": 1.0, "p90": 1.0},
        "variant": {"complete": True, "swaps": [], "compiled_modules": []},
        "grad_check_step0": {"ok": not flagged, "flagged": flagged or [], "worst": "w", "worst_value": 0.01,
                             "median": 0.005, "flag_above": 0.1, "max_rel_err": {"w": 0.01}},
    }  # fmt: skip


def test_summary_has_the_done_means_goals():
    losses = [11.0, 10.0, 9.0]
    results = {
        "eager": _fake(10_000, 80e9, losses), "compile": _fake(12_000, 70e9, losses),
        "patch": _fake(12_500, 50e9, losses), "compile+patch": _fake(12_500, 48e9, losses, breaks=2),
        "liger": _fake(12_000, 55e9, losses), "compile+liger": _fake(13_000, 52e9, losses, flagged=["w"]),
    }  # fmt: skip
    cfg = {"name": "hf-llama-llama3-8b-L8", "hidden": 4096, "layers": 8, "heads": 32, "kv_heads": 8, "head_dim": 128,
           "intermediate": 14336, "vocab": 128256, "seq": 4096, "batch": 4}  # fmt: skip
    meta = {"config": "hf", "hf": {"family": "llama"}, "model_config": cfg, "dtype": "bf16", "steps": 3, "warmup": 1,
            "nproc": 1, "gemm_ceiling_flops": 700e12}  # fmt: skip
    s = summarise(results, meta)
    g = s["goals"]
    assert set(GOALS) <= set(g)
    assert g["patch_vs_eager"]["value"] == pytest.approx(1.25) and g["patch_vs_eager"]["met"] is True
    assert g["compile+patch_vs_compile"]["met"] is False  # 1.042 < 1.05
    assert g["patch_vs_liger"]["met"] is True and g["compile+patch_vs_compile+liger"]["met"] is False
    assert g["patch_vs_liger_cut"]["value"] == pytest.approx(1 - 50 / 55) and g["patch_vs_liger_cut"]["met"]
    assert g["compile+patch_graph_breaks"] == {"target": "0", "value": 2, "met": False, "all_swaps_available": True}
    assert g["gradients_checked_step0"]["met"] is False
    assert g["gradients_checked_step0"]["flagged"]["compile+liger"] == ["w"]
    assert s["variants"]["patch"]["utilisation"]["palm"]["mfu_calibrated"] > 0
    md = report.markdown(s)
    assert "compile+patch_graph_breaks: 2 vs goal 0 — NOT met" in md and "flagged: {'compile+liger': ['w']}" in md
    speedups, memory, _ = summary_parts({k: v for k, v in results.items() if k != "liger"})
    assert "patch_vs_liger" not in speedups and "patch_vs_eager_cut" in memory


def test_grad_check_flags_the_parameter_that_differs():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    model(torch.randn(5, 4)).square().sum().backward()
    reference = {n: p.grad.clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        model[1].weight.grad[0, 0] += 0.5 * reference["1.weight"].abs().max()
        model[0].bias.grad.mul_(1 + 1e-5)
    out = grad_check(model, reference, "fp32")["grad_check_step0"]
    assert out["flagged"] == ["1.weight"] and out["worst"] == "1.weight"
    assert out["max_rel_err"]["1.weight"] == pytest.approx(0.5)
    assert 0 < out["max_rel_err"]["0.bias"] < 1e-3 and out["max_rel_err"]["0.weight"] == 0
    model[1].bias.grad = None
    assert grad_check(model, reference, "fp32")["grad_check_step0"]["max_rel_err"]["1.bias"] == float("inf")


def test_compile_leaves_a_bound_fused_loss_alone(monkeypatch):
    import transformers

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)  # what is compiled, not compiling it

    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=48, num_attention_heads=2, num_key_value_heads=1,
                                   num_hidden_layers=2, vocab_size=64)  # fmt: skip
    plain, bound = transformers.LlamaForCausalLM(cfg), transformers.LlamaForCausalLM(cfg)
    bound.forward = bound.forward  # an instance-level forward, as solkit.patch and Liger bind one
    assert compile_hf(plain)[-2:] == ["lm_head", "loss_function"]
    assert compile_hf(bound) == ["model.layers.0", "model.layers.1", "model.norm"]
    assert set(HF_VARIANTS) == {"eager", "compile", "patch", "compile+patch", "liger", "compile+liger"}


def test_compile_plus_patch_traces_every_swap_into_the_layer_graph():
    """compile+patch as train-bench runs it (compile_hf after solkit.patch): no graph break, each decoder layer's graph
    holds solkit's ops (the gate with down_proj, the o_proj GEMM with the residual, RoPE, both norms) and no plain
    down_proj or o_proj linear, and the fused loss runs outside the graphs (the logits are never built)."""
    import collections

    import transformers
    from torch._dynamo.utils import counters

    import solkit

    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=48, num_attention_heads=2, num_key_value_heads=1,
                                   head_dim=16, num_hidden_layers=1, vocab_size=64)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    assert solkit.patch(model, options={"attention": False}).complete
    seen: collections.Counter = collections.Counter()

    def record(gm, example_inputs):
        seen.update(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    torch._dynamo.reset()
    counters.clear()
    compile_hf(model, backend=record)
    x = torch.randint(64, (1, 8), generator=torch.Generator().manual_seed(0))
    out = model(input_ids=x, labels=x)
    out.loss.backward()
    assert dict(counters["graph_break"]) == {} and out.logits is None
    layers = seen["solkit.gated_linear.default"]
    assert layers >= 1 and seen["solkit.gemm.default"] == seen["solkit.rope.default"] == layers
    assert seen["solkit.rmsnorm.default"] >= 2 * layers
    assert seen["<built-in function linear>"] == 5 * layers  # q, k, v, gate, up: cuBLAS as in compile
    assert "solkit.fused_linear_cross_entropy.default" not in seen
