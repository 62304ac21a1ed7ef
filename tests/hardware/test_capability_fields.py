"""The capability fields of the hardware database: per-cc limits and features, and the products users have."""

import pytest

from solkit.hardware.specs import HardwareDB, cc_limits, get_spec, list_specs, load_db, match_spec

KB = 1024

#: (cc, shared memory per SM, per block, TMA, wgmma, Gluon Hopper ops), from the CUDA Programming Guide / PTX ISA.
EXPECTED = [
    ("8.0", 164, 163, False, False, False),
    ("8.6", 100, 99, False, False, False),
    ("8.9", 100, 99, False, False, False),
    ("9.0", 228, 227, True, True, True),
    ("10.0", 228, 227, True, False, False),
    ("12.0", 100, 99, True, False, False),
]

#: Every NVIDIA product our users have, with its compute capability and SM count.
PRODUCTS = [
    ("a100-sxm4-80gb", "8.0", 108),
    ("a10", "8.6", 72),
    ("a10g", "8.6", 80),
    ("rtx-3090", "8.6", 82),
    ("l40s", "8.9", 142),
    ("l4", "8.9", 58),
    ("rtx-4090", "8.9", 128),
    ("h100-sxm", "9.0", 132),
    ("h100-pcie", "9.0", 114),
    ("h200-sxm", "9.0", 132),
    ("b200", "10.0", 148),
    ("rtx-5090", "12.0", 170),
]


@pytest.mark.parametrize(("cc", "sm_kb", "block_kb", "tma", "wgmma", "gluon"), EXPECTED)
def test_cc_limits(cc, sm_kb, block_kb, tma, wgmma, gluon):
    lim = cc_limits(cc)
    assert lim.smem_per_sm_bytes.value == sm_kb * KB
    assert lim.smem_per_block_bytes.value == block_kb * KB
    assert lim.regs_per_sm.value == 65536 and lim.max_regs_per_thread.value == 255
    assert (lim.tma.value, lim.wgmma.value, lim.gluon_hopper.value) == (tma, wgmma, gluon)


@pytest.mark.parametrize(("arch", "cc", "sms"), PRODUCTS)
def test_products(arch, cc, sms):
    spec = get_spec(arch)
    assert spec.compute_capability == cc and spec.sm_count.value == sms
    assert cc_limits(spec.compute_capability) is not None
    assert spec.l2_bytes.value > 0 and "bf16_tensor" in spec.peaks_tflops


def test_every_nvidia_record_has_limits_and_every_value_is_sourced():
    db = load_db()
    for spec in list_specs():
        lim = cc_limits(spec.compute_capability)
        assert (lim is not None) == (spec.vendor == "nvidia"), spec.id
    for cc, lim in db.compute_capabilities.items():
        for s in lim.sourced():
            assert s.source in db.sources and db.sources[s.source].url, (cc, s)


def test_amd_and_unknown_cc_have_no_limits():
    assert cc_limits("gfx942") is None and cc_limits("7.5") is None


def test_validation_rejects_a_missing_cc_entry_and_an_oversized_block():
    raw = load_db().model_dump()
    missing = {**raw, "compute_capabilities": {k: v for k, v in raw["compute_capabilities"].items() if k != "8.6"}}
    with pytest.raises(ValueError, match="8.6"):
        HardwareDB.model_validate(missing)
    bad = {k: dict(v) for k, v in raw["compute_capabilities"].items()}
    bad["9.0"]["smem_per_block_bytes"] = {**bad["9.0"]["smem_per_block_bytes"], "value": 300 * KB}
    with pytest.raises(ValueError, match="exceeds"):
        HardwareDB.model_validate({**raw, "compute_capabilities": bad})


def test_rtx_5090_peak_is_a_lower_bound_ceiling():
    """The whitepaper's fp32-accumulate bf16 figure (209.5) was beaten by a public microbenchmark: not stored."""
    p = get_spec("rtx-5090").peaks_tflops["bf16_tensor"]
    assert p.value == pytest.approx(419) and "209.5" in p.note


@pytest.mark.parametrize(("name", "expected"), [
    ("NVIDIA A10", "a10"), ("NVIDIA A10G", "a10g"), ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"), ("NVIDIA GeForce RTX 3090 Ti", None),
    ("NVIDIA GeForce RTX 5090", "rtx-5090"),
])  # fmt: skip
def test_new_products_match_by_name(name, expected):
    m = match_spec(name)
    assert (m.id if m else None) == expected
