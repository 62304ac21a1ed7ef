"""`solkit analyze PROBLEM_DIR`: JSON fields, tables, warnings and one-line errors."""

from __future__ import annotations

import json

import pytest

from solkit.cli import main

GEMM_REF = "import torch\n\ndef run(a, b):\n    return a @ b\n"


def write_problem(root, reference=GEMM_REF, **overrides):
    d = {
        "name": "gemm_bf16",
        "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 256}, "K": {"type": "const", "value": 128}},
        "inputs": {"a": {"shape": ["M", "K"], "dtype": "bfloat16"}, "b": {"shape": ["K", "N"], "dtype": "bfloat16"}},
        "outputs": {"c": {"shape": ["M", "N"], "dtype": "bfloat16"}},
        "reference": reference,
    }
    d.update(overrides)
    root.mkdir(parents=True, exist_ok=True)
    (root / "definition.json").write_text(json.dumps(d))
    wls = [{"uuid": f"m{m}", "axes": {"M": m}, "inputs": {"a": {"type": "random"}, "b": {"type": "random"}}} for m in (
        1, 4096)]  # fmt: skip
    (root / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in wls))
    return root


def test_json_has_one_object_per_workload(tmp_path, capsys):
    assert main(["analyze", str(write_problem(tmp_path)), "--arch", "h200-sxm", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["uuid"] for o in out] == ["m1", "m4096"]
    big = out[1]
    required = ("uuid", "axes", "flops_total", "flops", "fused_bytes", "unfused_bytes", "t_sol_ms", "bound", "arch")
    assert all(k in big for k in (*required, "basis", "uncounted"))
    assert big["axes"] == {"N": 256, "K": 128, "M": 4096}
    assert big["flops"] == {"bf16_tensor": 2 * 4096 * 256 * 128} == {"bf16_tensor": big["flops_total"]}
    assert big["fused_bytes"] == 2 * (4096 * 128 + 128 * 256 + 4096 * 256)
    assert big["arch"] == "h200-sxm" and big["basis"] == "spec" and big["uncounted"] == []
    assert big["bound"] in ("compute", "memory") and big["t_sol_ms"] > 0
    assert big["ops"][0]["op"] == "aten.mm"
    assert big["per_arch"]["h200-sxm"]["t_sol_ms"] == pytest.approx(big["t_sol_ms"])
    assert big["per_arch"]["b200"]["t_sol_ms"] < big["t_sol_ms"]


def test_table_output(tmp_path, capsys):
    assert main(["analyze", str(write_problem(tmp_path)), "--arch", "b200", "--all-archs"]) == 0
    out = capsys.readouterr().out
    assert "gemm_bf16" in out and "aten.mm" in out and "b200" in out and "a100-sxm4-80gb" in out


def test_fp32_policy_flag(tmp_path, capsys):
    root = write_problem(tmp_path)
    d = json.loads((root / "definition.json").read_text())
    for spec in (*d["inputs"].values(), *d["outputs"].values()):
        spec["dtype"] = "float32"
    (root / "definition.json").write_text(json.dumps(d))
    main(["analyze", str(root), "--arch", "h200-sxm", "--json", "--tf32", "off"])
    assert set(json.loads(capsys.readouterr().out)[0]["flops"]) == {"fp32_vector"}
    main(["analyze", str(root), "--arch", "h200-sxm", "--json", "--tf32", "on"])
    assert set(json.loads(capsys.readouterr().out)[0]["flops"]) == {"tf32_tensor"}


def test_unknown_op_warns_and_exits_zero(tmp_path, capsys):
    ref = "import torch\n\ndef run(a, b):\n    return torch.lgamma(a.float()) @ b.float()\n"
    root = write_problem(tmp_path, ref, outputs={"c": {"shape": ["M", "N"], "dtype": "float32"}})
    assert main(["analyze", str(root), "--arch", "h200-sxm", "--json"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)[0]["uncounted"] == ["aten.lgamma"]
    assert "warning" in cap.err and "aten.lgamma" in cap.err


@pytest.mark.parametrize(
    "breakage,field",
    [
        ("invalid_json", "line 1"),
        ("no_run", "reference"),
        ("unknown_axis", "inputs.a.shape"),
    ],
)
def test_malformed_definition_is_one_line_exit_2(tmp_path, capsys, breakage, field):
    root = write_problem(tmp_path)
    path = root / "definition.json"
    if breakage == "invalid_json":
        path.write_text('{"name": "x", ')
    elif breakage == "no_run":
        write_problem(tmp_path, "import torch\n\ndef forward(a, b):\n    return a @ b\n")
    else:
        d = json.loads(path.read_text())
        d["inputs"]["a"]["shape"] = ["M", "Q"]
        path.write_text(json.dumps(d))
    assert main(["analyze", str(root), "--arch", "h200-sxm", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "definition.json" in err and field in err


def test_unknown_arch_is_a_one_line_error(tmp_path, capsys):
    assert main(["analyze", str(write_problem(tmp_path)), "--arch", "z9000"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_no_gpu_falls_back_to_h200_with_a_warning(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["analyze", str(write_problem(tmp_path)), "--json"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)[0]["arch"] == "h200-sxm" and "no GPU" in cap.err
