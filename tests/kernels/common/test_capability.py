"""The capability model: device caps from the database, needs, and the path choice on every architecture."""

import pytest
import torch

from solkit.errors import SolkitError
from solkit.kernels.common.capability import (
    INTERPRETER_CAPS,
    Needs,
    as_cc,
    caps_for_cc,
    caps_for_device,
    caps_for_product,
    choose,
    unmet,
)

KB = 1024

#: A dispatcher in the shape the integration will give every family: fastest first, portable last.
PATHS = [
    ("gluon_ws", Needs(min_cc=(9, 0), max_cc=(10, 0), gluon=True, wgmma=True, tma=True, smem_bytes=200 * KB)),
    ("tma_persistent", Needs(min_cc=(9, 0), tma=True, smem_bytes=160 * KB)),
    ("cp_async_big", Needs(min_cc=(8, 0), smem_bytes=128 * KB)),
    ("portable", Needs(smem_bytes=64 * KB)),
]

#: (product, cc, path chosen, paths skipped): sm_80 has the smem for the big cp.async tile but no TMA; sm_86/89
#: and sm_120 have 99 KB per program; sm_100 has TMA but no wgmma/Gluon Hopper ops.
MATRIX = [
    ("a100-sxm4-80gb", (8, 0), "cp_async_big", ["gluon_ws", "tma_persistent"]),
    ("a10", (8, 6), "portable", ["gluon_ws", "tma_persistent", "cp_async_big"]),
    ("rtx-3090", (8, 6), "portable", ["gluon_ws", "tma_persistent", "cp_async_big"]),
    ("rtx-4090", (8, 9), "portable", ["gluon_ws", "tma_persistent", "cp_async_big"]),
    ("l40s", (8, 9), "portable", ["gluon_ws", "tma_persistent", "cp_async_big"]),
    ("h100-sxm", (9, 0), "gluon_ws", []),
    ("h200-sxm", (9, 0), "gluon_ws", []),
    ("b200", (10, 0), "tma_persistent", ["gluon_ws"]),
    ("rtx-5090", (12, 0), "portable", ["gluon_ws", "tma_persistent", "cp_async_big"]),
]


@pytest.mark.parametrize(("product", "cc", "path", "skipped"), MATRIX)
def test_choice_on_every_arch(product, cc, path, skipped):
    caps = caps_for_product(product)
    assert caps.cc == cc
    chosen, reasons = choose(PATHS, caps)
    assert chosen == path and list(reasons) == skipped
    assert all(r and all("\n" not in x for x in r) for r in reasons.values())
    assert not unmet(dict(PATHS)[chosen], caps)  # never a path the device does not meet


def test_caps_for_product_values():
    h200 = caps_for_product("h200-sxm")
    assert (h200.sm_count, h200.smem_per_block, h200.smem_per_sm, h200.regs_per_sm) == (132, 227 * KB, 228 * KB, 65536)
    assert h200.has_tma and h200.has_wgmma and h200.gluon_hopper and h200.l2_bytes == 60 * 2**20 and h200.sm == 90
    b200 = caps_for_product("b200")
    assert b200.has_tma and not b200.has_wgmma and not b200.gluon_hopper
    r5090 = caps_for_product("rtx-5090")
    assert r5090.has_tma and not r5090.has_wgmma and r5090.smem_per_block == 99 * KB
    a100 = caps_for_product("a100-sxm4-80gb")
    assert not a100.has_tma and a100.smem_per_block == 163 * KB


def test_reasons_are_specific():
    caps = caps_for_product("rtx-4090")
    reasons = unmet(Needs(min_cc=90, tma=True, smem_bytes=128 * KB), caps)
    assert reasons == [
        "needs sm_90 or later, sm_89 is not",
        "needs TMA, sm_89 has none",
        f"needs {128 * KB} B of shared memory per program, sm_89 allows {99 * KB}",
    ]
    assert unmet(Needs(max_cc="10.0"), caps_for_product("b200")) == ["needs a part below sm_100, sm_100 is not"]
    assert unmet(Needs(max_regs=256), caps) == ["needs 256 registers per thread, sm_89 allows 255"]
    assert unmet(Needs(max_regs=255, warps=16), caps) == ["needs 130560 registers per program, sm_89 has 65536"]
    assert unmet(Needs(max_regs=128, warps=16), caps) == []


def test_interpreter_runs_only_portable_paths():
    assert choose(PATHS, INTERPRETER_CAPS) == ("portable", {n: unmet(nd, INTERPRETER_CAPS) for n, nd in PATHS[:3]})
    assert unmet(Needs(smem_bytes=10**9, max_regs=999), INTERPRETER_CAPS) == []  # no limits in the interpreter
    assert unmet(Needs(min_cc=80), INTERPRETER_CAPS) == ["needs sm_80 or later, the interpreter is not"]


def test_caps_for_device_on_cpu_is_the_interpreter():
    assert caps_for_device("cpu") is INTERPRETER_CAPS
    if not torch.cuda.is_available():
        assert caps_for_device() is INTERPRETER_CAPS


@pytest.mark.gpu
def test_caps_for_device_on_gpu_agrees_with_the_db():
    caps = caps_for_device(0)
    p = torch.cuda.get_device_properties(0)
    assert caps.cc == (p.major, p.minor) and caps.sm_count == p.multi_processor_count and caps.source == "device"
    if caps.cc == (9, 0):
        assert caps.has_tma and caps.has_wgmma and caps.smem_per_block == 227 * KB


def test_choose_rules():
    with pytest.raises(SolkitError, match="portable"):
        choose(PATHS[:2], caps_for_product("h200-sxm"))
    with pytest.raises(SolkitError, match="no path runs on rtx-4090"):
        choose([("huge", Needs(smem_bytes=200 * KB))], caps_for_product("rtx-4090"))
    with pytest.raises(SolkitError):
        choose([], INTERPRETER_CAPS)


def test_cc_forms_and_unknowns():
    assert as_cc("9.0") == as_cc("sm_90a") == as_cc(90) == as_cc((9, 0)) == (9, 0)
    assert as_cc("12.0") == (12, 0) and as_cc(120) == (12, 0) and as_cc(None) is None
    with pytest.raises(SolkitError):
        as_cc("hopper")
    with pytest.raises(SolkitError, match="sm_75"):
        caps_for_cc(75, sm_count=40)
    with pytest.raises(SolkitError, match="amd"):
        caps_for_product("mi300x")
    assert Needs().portable and not Needs(min_cc=80).portable and Needs(smem_bytes=1).portable


def test_simulate_portable_only_and_device_caps():
    import torch

    from solkit.kernels.common import capability as C

    paths = [("tma", C.Needs(min_cc=90, tma=True)), ("portable", C.Needs())]
    assert C.device_caps(torch.zeros(1)) is C.INTERPRETER_CAPS
    with C.simulate(C.caps_for_product("h200-sxm")):
        assert C.device_caps(torch.zeros(1)).name == "h200-sxm"
        assert C.choose(paths, C.device_caps()) == ("tma", {})
        with C.portable_only():
            name, skipped = C.choose(paths, C.device_caps())
            assert name == "portable" and "forced" in skipped["tma"][-1]
    with C.simulate(C.caps_for_cc((8, 9), sm_count=128)):
        name, skipped = C.choose(paths, C.device_caps())
        assert name == "portable" and any("TMA" in r for r in skipped["tma"])
    assert C.device_caps(torch.zeros(1)) is C.INTERPRETER_CAPS  # the simulation ends with its block


def test_forced_portable_by_environment(monkeypatch):
    from solkit.kernels.common import capability as C

    monkeypatch.setenv(C.PATH_ENV, "portable")
    assert C.forced_portable()
    monkeypatch.setenv(C.PATH_ENV, "")
    assert not C.forced_portable()
