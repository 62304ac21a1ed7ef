import json

import pytest
import torch
from harness_helpers import EXAMPLES

from solkit.harness.inputs import InputFactory, poison_, random_tensor, trial_seed
from solkit.problems import load_problem


def test_inputs_are_deterministic_per_trial_and_fresh_across_trials():
    p = load_problem(EXAMPLES / "rmsnorm")
    w = p.workloads[1]
    f = InputFactory(p, "cpu", seed=7)
    a, b, c = f.generate(w, 0), f.generate(w, 0), f.generate(w, 1)
    assert torch.equal(a["hidden_states"], b["hidden_states"]) and not torch.equal(
        a["hidden_states"], c["hidden_states"]
    )
    assert a["hidden_states"].shape == (37, 4096) and a["hidden_states"].dtype == torch.bfloat16
    assert not torch.equal(InputFactory(p, "cpu", seed=8).generate(w, 0)["weight"], a["weight"])
    assert trial_seed(1, "u", 0) != trial_seed(1, "u", 1)


@pytest.mark.parametrize(
    "name,shape,check",
    [
        ("input_norm_weight", (512,), lambda t: abs(float(t.mean()) - 1.0) < 0.05 and float(t.std()) > 0.05),
        ("attention_mask", (6, 6), lambda t: t[0, 1] < -1e30 and t[1, 0] == 0 and t[5, 5] == 0),
        ("rope_cos", (64,), lambda t: float(t.abs().max()) <= 1.0),
        ("rstd", (64,), lambda t: float(t.min()) >= 0.1),
        ("A", (64,), lambda t: float(t.max()) < 0),
        ("routing_probs", (4, 8), lambda t: torch.allclose(t.sum(-1), torch.ones(4), atol=1e-5)),
        ("up_proj_weight", (256, 1024), lambda t: float(t.std()) < 0.1),
        ("x", (256, 1024), lambda t: 0.9 < float(t.std()) < 1.1),
        ("pad_mask", (100,), lambda t: set(t.unique().tolist()) <= {0.0, 1.0}),
    ],
)
def test_name_heuristics(name, shape, check):
    g = torch.Generator().manual_seed(0)
    assert check(random_tensor(name, shape, torch.float32, g, torch.device("cpu")))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.bool, torch.float8_e4m3fn])
def test_non_float_dtypes(dtype):
    g = torch.Generator().manual_seed(0)
    t = random_tensor("ids", (1000,), dtype, g, torch.device("cpu"))
    assert t.dtype == dtype
    if dtype == torch.float8_e4m3fn:
        assert float(t.float().abs().max()) <= 2.0
    elif dtype != torch.bool:
        assert int(t.max()) > int(t.min())


def test_poison_values():
    assert torch.isnan(poison_(torch.empty(3))).all()
    assert torch.isnan(poison_(torch.empty(3, dtype=torch.bfloat16))).all()
    assert (poison_(torch.empty(3, dtype=torch.int32)) == -12345).all()
    assert poison_(torch.empty(3, dtype=torch.bool)).all()


def test_custom_inputs_and_scalars():
    p = load_problem(EXAMPLES / "gather_rows")
    f = InputFactory(p, "cpu")
    w = p.workloads[1]
    a, b = f.generate(w, 0), f.generate(w, 0)
    assert a["table"].shape == (5000, 64) and int(a["ids"].max()) < 5000
    assert torch.equal(a["ids"], b["ids"]) and not torch.equal(a["ids"], f.generate(w, 1)["ids"])
    outs = f.allocate_outputs(w)
    assert outs["out"].shape == (300, 64) and torch.isnan(outs["out"]).all()


def test_safetensors_inputs(tmp_path):
    from safetensors.torch import save_file

    weight = torch.randn(16)
    (tmp_path / "blob").mkdir()
    save_file({"w": weight}, str(tmp_path / "blob" / "w.safetensors"))
    d = json.loads((EXAMPLES / "rmsnorm" / "definition.json").read_text())
    d["axes"]["hidden_size"]["value"] = 16
    (tmp_path / "definition.json").write_text(json.dumps(d))
    st = {"type": "safetensors", "path": "data/blob/w.safetensors", "tensor_key": "w"}  # leading "data/" is stripped
    row = {"uuid": "st", "axes": {"batch_size": 2}, "inputs": {"hidden_states": {"type": "random"}, "weight": st}}
    (tmp_path / "workload.jsonl").write_text(json.dumps(row) + "\n")
    p = load_problem(tmp_path)
    f = InputFactory(p, "cpu")
    with pytest.raises(Exception, match="dtype"):  # file holds fp32, definition says bf16
        f.generate(p.workloads[0], 0)
    save_file({"w": weight.bfloat16()}, str(tmp_path / "blob" / "w.safetensors"))
    got = InputFactory(p, "cpu").generate(p.workloads[0], 1)["weight"]
    assert torch.equal(got, weight.bfloat16())
