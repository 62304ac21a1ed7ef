"""The ncu CSV parser and error classifier against recorded/crafted ncu outputs in fixtures/."""

from __future__ import annotations

from pathlib import Path

import pytest

from solkit.profile.ncu import build_command, classify_error
from solkit.profile.ncu_parse import (
    METRICS,
    KernelMetrics,
    NcuParseError,
    attribute_by_order,
    parse_csv,
    parse_number,
)

FIX = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    "text,value",
    [
        ("1,073,755,904", 1073755904.0),
        ("12.50", 12.5),
        ("", None),
        ("n/a", None),
        ("N/A", None),
        ("--", None),
        ("(!) 3.5", 3.5),
        ("1\u202f024", 1024.0),
        (None, None),
        ("abc", None),
        ("-7", -7.0),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


def test_crafted_raw_three_kernels():
    kernels = parse_csv((FIX / "crafted_raw_three_kernels.csv").read_text())
    assert [k.id for k in kernels] == [0, 1, 2]
    softmax, copy, gemm = kernels
    # kernel names contain commas and parentheses: csv.reader, never split(",")
    assert softmax.name.startswith("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float")
    assert "lambda(float)#1" in copy.name
    assert softmax.get("dram_bytes_read") == 134_221_824  # thousands separators
    assert copy.get("duration_ns") == pytest.approx(12_736.5)
    assert softmax.get("tensor_ops_tf32") is None  # 'n/a'
    assert copy.get("l2_hit_rate_pct") is None
    assert gemm.get("tensor_ops_fp8") is None  # column absent altogether
    assert gemm.get("tensor_ops_bf16") == pytest.approx(139_586_437_120)
    assert gemm.units["duration_ns"] == "nsecond"
    assert [k.target for k in kernels] == ["softmax.reference", "softmax.reference", "gemm.reference"]
    assert "tensor_ops_fp8" in gemm.to_dict()["missing"]


def test_details_layout_with_auto_units_is_normalised():
    (k,) = parse_csv((FIX / "crafted_details_autounits.csv").read_text())
    assert k.name == "triton_red_fused_rms_norm_0"
    assert k.get("duration_ns") == pytest.approx(62_720.0)  # usecond -> ns
    assert k.get("dram_bytes_read") == pytest.approx(134.23e6)  # Mbyte -> byte
    assert k.get("achieved_occupancy_pct") == pytest.approx(79.3)
    assert k.get("l2_hit_rate_pct") is None


@pytest.mark.parametrize("name", sorted(p.name for p in FIX.glob("real_*raw*.csv")))
def test_real_h200_raw_csv(name):
    """Recorded on the H200 (ncu 2025.3.1): every row parses, core metrics present, NVTX attributed."""
    kernels = parse_csv((FIX / name).read_text())
    assert kernels
    for k in kernels:
        assert k.get("duration_ns") and k.get("duration_ns") > 0
        assert k.get("dram_bytes_read") is not None
        assert 0 <= (k.get("sm_throughput_pct") or 0) <= 100


@pytest.mark.parametrize("bad", ["", "==PROF== nothing here\n", "a,b,c\n1,2,3\n"])
def test_garbage_raises_parse_error(bad):
    with pytest.raises(NcuParseError):
        parse_csv(bad)


@pytest.mark.parametrize(
    "fixture,kind",
    [
        ("err_nvgpuctrperm.txt", "no_permission"),
        ("err_library_not_loaded.txt", "profiler_unavailable"),
        ("err_no_kernels.txt", "no_kernels"),
    ],
)
def test_classify_error_fixtures(fixture, kind):
    err = classify_error((FIX / fixture).read_text())
    assert err is not None and err.kind == kind
    assert "\n" not in err.message


def test_classify_clean_and_app_error():
    assert classify_error("==PROF== Disconnected from process 1\n", 0) is None
    err = classify_error(
        "Traceback (most recent call last):\nValueError: boom\n==ERROR== The application returned an error code (1).\n"
    )
    assert err.kind == "app_error"
    assert classify_error("", 3).kind == "ncu_error"


def test_build_command_always_leaves_clocks_alone():
    cmd = build_command(
        "/x/ncu", ["python3", "-m", "drv"], "/tmp/r", launch_skip=2, launch_count=5, kernel_regex="gemm"
    )
    i = cmd.index("--clock-control")
    assert cmd[i + 1] == "none"
    assert cmd[-3:] == ["python3", "-m", "drv"]
    assert cmd[cmd.index("--profile-from-start") : cmd.index("--profile-from-start") + 2] == [
        "--profile-from-start",
        "off",
    ]
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert set(metrics) == set(METRICS.values())
    assert "--launch-skip" in cmd and "regex:gemm" in cmd


def test_attribute_by_order():
    ks = [KernelMetrics(i, f"k{i}", {}) for i in range(3)]
    assert attribute_by_order(ks, [("a", 2), ("b", 1)])
    assert [k.target for k in ks] == ["a", "a", "b"]
    ks2 = [KernelMetrics(i, f"k{i}", {}) for i in range(3)]
    assert not attribute_by_order(ks2, [("a", 1)])  # counts disagree: leave unattributed
    assert all(k.target is None for k in ks2)


# --------------------------------------------------------------------------- recorded on the H200
LABELS = [
    ("rmsnorm.reference", 8),
    ("rmsnorm.solkit", 1),
    ("softmax.reference", 3),
    ("softmax.solkit", 1),
    ("gemm_bf16.reference", 1),
    ("gemm_bf16.solkit", 1),
    ("o_proj_residual.reference", 2),
    ("o_proj_residual.solkit", 1),
]


@pytest.mark.parametrize("name", ["real_h200_raw.csv", "real_h200_raw_autounits.csv", "real_h200_raw_nvtxrename.csv"])
def test_real_raw_layouts_agree(name):
    """Base units, auto-scaled units (ms, Gbyte, Ghz, Kbyte/block) and NVTX-renamed kernels all give
    the same 18 kernels, attributed to the same NVTX ranges, with the same values."""
    base = parse_csv((FIX / "real_h200_raw.csv").read_text())
    other = parse_csv((FIX / name).read_text())
    expected = [label for label, n in LABELS for _ in range(n)]
    assert [k.target for k in other] == expected
    assert [k.id for k in other] == list(range(18))
    for a, b in zip(base, other):
        for key, va in a.metrics.items():
            vb = b.metrics[key]
            assert (va is None) == (vb is None), key
            if va:
                assert vb == pytest.approx(va, rel=1e-2, abs=0.01), (key, a.name)  # auto units round
    gemm = base[13]
    assert gemm.name.startswith("nvjet_sm90")
    assert gemm.get("tensor_ops_bf16") == 2 * 8192 * 4096 * 4096  # the executed MMA work equals 2·M·N·K
    assert gemm.get("tensor_pipe_pct") > 90 and gemm.get("smem_dynamic_bytes") == 213_188


def test_real_details_subset_matches_raw():
    raw = {k.id: k for k in parse_csv((FIX / "real_h200_raw.csv").read_text())}
    det = parse_csv((FIX / "real_h200_details.csv").read_text())
    assert [k.id for k in det] == [0, 8, 13]
    for k in det:
        assert k.target == raw[k.id].target
        for key in ("duration_ns", "dram_bytes_read", "sm_throughput_pct", "registers_per_thread"):
            assert k.get(key) == pytest.approx(raw[k.id].get(key), rel=2e-3)


def test_real_ncu_version_is_parsed():
    from solkit.profile import ncu

    text = (FIX / "real_h200_ncu_version.txt").read_text()
    m = ncu.re.search(r"Version\s+([\w.\-() ]+)", text)
    assert m and m.group(1).startswith("2025.3.1")
