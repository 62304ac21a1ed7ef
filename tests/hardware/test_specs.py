import pytest

from solkit.errors import SolkitError
from solkit.hardware.specs import UNITS, arch_ids, get_spec, list_specs, load_db, match_spec, resolve_dtype

REQUIRED_IDS = [
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "a100-pcie-80gb",
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h200-sxm",
    "h200-nvl",
    "b200",
    "gb200",
    "l40s",
    "l4",
    "rtx-4090",
    "a10g",
    "mi300x",
    "mi325x",
]


def test_every_required_record_exists():
    assert set(REQUIRED_IDS) <= set(arch_ids())


@pytest.mark.parametrize(
    ("arch", "bf16_tflops", "bandwidth_tbs"),
    [("h100-sxm", 989.4, 3.35), ("h200-sxm", 989.4, 4.8), ("a100-sxm4-80gb", 312, 2.039)],
)
def test_done_when_peaks(arch, bf16_tflops, bandwidth_tbs):
    spec = get_spec(arch)
    assert spec.peak_flops("bf16_tensor") == pytest.approx(bf16_tflops * 1e12, rel=0.01)
    assert spec.bandwidth == pytest.approx(bandwidth_tbs * 1e12, rel=1e-6)


def test_every_value_is_sourced_and_dense():
    db = load_db()
    for spec in list_specs():
        fields = [spec.sm_count, spec.boost_clock_mhz, spec.memory_bytes, spec.memory_bandwidth_gbs, spec.l2_bytes]
        for s in fields + list(spec.peaks_tflops.values()):
            assert s.source in db.sources, (spec.id, s)
            assert db.sources[s.source].url
            assert s.kind in ("datasheet", "whitepaper", "derived", "low-confidence", "measured")
        assert set(spec.peaks_tflops) <= set(UNITS)
        # fp8 runs at most ~2x bf16 on every part: a 4x ratio would mean one column was stored sparse.
        p = {u: s.value for u, s in spec.peaks_tflops.items()}
        if "bf16_tensor" in p and "fp8_tensor" in p:
            assert p["fp8_tensor"] <= 2.05 * p["bf16_tensor"], spec.id


def test_sparse_values_are_halved_and_noted():
    h100 = get_spec("h100-sxm").peaks_tflops["bf16_tensor"]
    assert h100.value == pytest.approx(989.4)
    assert "sparsity" in (h100.note or "")


def test_unknown_arch_names_allowed_values():
    with pytest.raises(SolkitError) as e:
        get_spec("h300")
    assert "h200-sxm" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("name", "sms", "mem", "expected"), [
    ("NVIDIA H200", 132, 150_000_000_000, "h200-sxm"),
    ("NVIDIA H100 80GB HBM3", 132, 85_000_000_000, "h100-sxm"),
    ("NVIDIA H100 PCIe", 114, 85_000_000_000, "h100-pcie"),
    ("NVIDIA A100-SXM4-80GB", 108, 85_000_000_000, "a100-sxm4-80gb"),
    ("NVIDIA GeForce RTX 4090", 128, 25_000_000_000, "rtx-4090"),
    ("NVIDIA H200 NVL", 132, 150_000_000_000, "h200-nvl"),
    ("Some Future GPU", 200, 1, None),
])  # fmt: skip
def test_match_spec(name, sms, mem, expected):
    m = match_spec(name, sms, mem)
    assert (m.id if m else None) == expected


@pytest.mark.parametrize(("text", "expected"), [("bfloat16", "bf16"), ("BF16", "bf16"), ("float32", "fp32"),
                                                ("e4m3", "fp8")])  # fmt: skip
def test_resolve_dtype(text, expected):
    assert resolve_dtype(text) == expected


def test_resolve_dtype_rejects_unknown():
    with pytest.raises(SolkitError, match="allowed"):
        resolve_dtype("int3")
