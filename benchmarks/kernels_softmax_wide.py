"""Wide-row softmax (vocabulary widths, and the 14336 intermediate) on the H200: solkit's paths, Liger, torch.compile.

Variants are solkit launch settings (``packed`` = :mod:`solkit.kernels._softmax_packed`; ``looped``, ``split``
and ``default`` = the other paths of :mod:`solkit.kernels.softmax`) or rivals (``liger``, ``compile``,
``eager``). Per shape one bf16 input ``x = 4 randn`` and one ``dy = randn``; every variant is first checked
against a float64 reference over every row (output and gradient: max error at most twice eager PyTorch's own
bf16 error + ``1e-3 max|ref|``, no NaN; the output buffers poisoned with NaN before), then timed with
``solkit.harness.timing.benchmark(method="auto", l2_flush_mode="read")`` (CUDA events, per-call events in a
CUDA graph for calls under 0.1 ms), two rotating input sets. Modes: ``fwd`` (bytes ``2MNe``), ``bwd`` (the
backward alone, ``3MNe``) and ``fwdbwd`` (``5MNe``). SOL against the copy bandwidth measured in the same
run (calibrated) and the 4.8 TB/s datasheet.

    python3 kernels_softmax_wide.py --warm 0/4             # compile a quarter of the variants (tiny rows)
    python3 kernels_softmax_wide.py --warm-compile         # torch.compile (max-autotune) of the rival shapes
    python3 kernels_softmax_wide.py --plan round1 --out r.json --budget-s 90
    python3 kernels_softmax_wide.py --plan smoke --smoke   # CPU interpreter, tiny shapes: logic check only
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
import traceback

if "--smoke" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402

from solkit.harness.timing import benchmark  # noqa: E402
from solkit.kernels.softmax import softmax_backward, softmax_forward  # noqa: E402
from solkit.sol.model import Ceilings, sol_fraction, t_sol  # noqa: E402

DATASHEET_BW = 4.8e12
T0 = time.perf_counter()
SHAPES = {"vocab8k": (8192, 128256), "vocab4k": (4096, 128256), "256k": (1024, 262144), "inter": (8192, 14336),
          "hidden": (8192, 4096), "smoke": (5, 1030), "smoke_odd": (3, 1031), "smoke_rows": (5, 14336)}  # fmt: skip


def _p(**kw) -> dict:
    return {"packed": kw}


#: name -> (forward options, backward options) for solkit's launchers (``None``: that mode not run).
VARIANTS = {
    "default": ({}, {}),
    "looped": ({"coop": False, "split": False}, {"coop": False, "split": False}),
    "split": ({"split": True}, {"split": True}),
    "single": ({"packed": False}, {"packed": False}),
    "single_w8": ({"packed": False, "num_warps": 8}, {"packed": False, "num_warps": 8}),
    "single_w16": ({"packed": False, "num_warps": 16}, {"packed": False, "num_warps": 16}),
    # packed forward: block (chunk columns), warps, programs per SM, kept values, early load, L2 prefetch rows
    "pk": (_p(), _p()),
    "pk_e16": (_p(keep_e=1), None),
    "pk_pf0": (_p(l2_prefetch=0), _p(l2_prefetch=0)),
    "pk_pf2": (_p(l2_prefetch=2), _p(l2_prefetch=2)),
    "pk_late": (_p(early_load=0), _p(early_load=0)),
    "pk_2k_w2_8": (_p(block=2048, num_warps=2, per_sm=8), _p(block=1024, num_warps=2, per_sm=8)),
    "pk_2k_w4_4": (_p(block=2048, num_warps=4, per_sm=4), _p(block=2048, num_warps=4, per_sm=4)),
    "pk_4k_w8_2": (_p(block=4096, num_warps=8, per_sm=2), _p(block=4096, num_warps=8, per_sm=2)),
    "pk_8k_w8_2": (_p(block=8192, num_warps=8, per_sm=2), _p(block=4096, num_warps=4, per_sm=2)),
    "pk_4k_w4_3": (_p(block=4096, num_warps=4, per_sm=3), _p(block=2048, num_warps=4, per_sm=3)),
    "pk_8k_w16_1": (_p(block=8192, num_warps=16, per_sm=1), _p(block=8192, num_warps=16, per_sm=1)),
    "pk_d3_2k_w4_4": (_p(depth=3, block=2048, num_warps=4, per_sm=4), None),
    "pk_d3_4k_w8_2": (_p(depth=3, block=4096, num_warps=8, per_sm=2), None),
    "pk_d3_4k_w4_3": (_p(depth=3, block=4096, num_warps=4, per_sm=3), None),
    "pk_s2_2k_w4_4": (_p(skew=2, block=2048, num_warps=4, per_sm=4), None),
    "pk_s2_4k_w4_3": (_p(skew=2, block=4096, num_warps=4, per_sm=3), None),
    "pk_s2_4k_w8_2": (_p(skew=2, block=4096, num_warps=8, per_sm=2), None),
    "pk_1k_w2_8": (_p(block=1024, num_warps=2, per_sm=8), _p(block=1024, num_warps=2, per_sm=8)),
    "pk_fb": (_p(fallback=True), _p(fallback=True)),
    # round 2: f16 exponentials kept (forward), the late load (backward), cache hints, one-chunk rows
    "e16": (_p(keep_e=1), _p(early_load=0)),
    "e16_h1": (_p(keep_e=1, hint=1), _p(early_load=0, hint=1)),
    "e16_h2": (_p(keep_e=1, hint=2), _p(early_load=0, hint=2)),
    "e16_late": (_p(keep_e=1, early_load=0), _p(early_load=0, l2_prefetch=2)),
    "e16_pf0": (_p(keep_e=1, l2_prefetch=0), _p(early_load=0, hint=1, l2_prefetch=2)),
    "e16_pf2": (_p(keep_e=1, l2_prefetch=2), _p(early_load=0, block=1024, num_warps=2, per_sm=8)),
    "e16_2k_w2_8": (
        _p(keep_e=1, block=2048, num_warps=2, per_sm=8),
        _p(early_load=0, block=2048, num_warps=2, per_sm=8),
    ),
    "e16_8k_w8_2": (
        _p(keep_e=1, block=8192, num_warps=8, per_sm=2),
        _p(early_load=0, block=8192, num_warps=16, per_sm=1),
    ),
    "e16_s2_4k_w4_3": (
        _p(keep_e=1, skew=2, block=4096, num_warps=4, per_sm=3),
        _p(early_load=0, hint=2, l2_prefetch=2),
    ),
    "e16_h1_pf2": (_p(keep_e=1, hint=1, l2_prefetch=2), _p(early_load=0, block=4096, num_warps=8, per_sm=2)),
    "e16_nowait": (_p(keep_e=1, max_spins=0), _p(early_load=0, max_spins=0)),
    "ebf": (_p(keep_e=2), None),  # bf16 exponentials kept, one fma.rn.bf16x2 per pair: timed even if it fails
    "ebf_h1": (_p(keep_e=2, hint=1), None),
    "ebf_h2": (_p(keep_e=2, hint=2), None),
    "sp1_16k_w16_ebf_h1": (_p(block=16384, num_warps=16, per_sm=1, keep_e=2, hint=1), None),
    "sp1_16k_w16_ebf_h2": (_p(block=16384, num_warps=16, per_sm=1, keep_e=2, hint=2), None),
    # round 4: 14336 one-chunk forward (one more register row, no L2 prefetch, late load); 8192x4096 candidates
    "sp1_16k_d3_ebf_h1": (_p(block=16384, num_warps=16, per_sm=1, keep_e=2, hint=1, depth=3), None),
    "sp1_16k_ebf_h1_pf0": (_p(block=16384, num_warps=16, per_sm=1, keep_e=2, hint=1, l2_prefetch=0), None),
    "sp1_16k_ebf_h1_late": (_p(block=16384, num_warps=16, per_sm=1, keep_e=2, hint=1, early_load=0), None),
    "e16_h2_r3": (_p(keep_e=1, hint=2), None),  # the round-3 wide forward default
    "sp1_4k_ebf_h1": (_p(block=4096, num_warps=4, per_sm=4, keep_e=2, hint=1), None),
    "sp1_4k_ebf_h2": (_p(block=4096, num_warps=4, per_sm=4, keep_e=2, hint=2), None),
    "sp1_4k_e16_h2": (_p(block=4096, num_warps=4, per_sm=4, keep_e=1, hint=2), None),
    "sp1_4k_w8_ebf_h1": (_p(block=4096, num_warps=8, per_sm=2, keep_e=2, hint=1), None),
    "sp1_4k_w4_3_d3_ebf_h1": (_p(block=4096, num_warps=4, per_sm=3, keep_e=2, hint=1, depth=3), None),
    "single_bm2_cs": (
        {"packed": False, "block_m": 2, "store_cs": True},
        {"packed": False, "block_m": 2, "store_cs": True},
    ),
    "sp1_16k_w16": (_p(block=16384, num_warps=16, per_sm=1), _p(block=16384, num_warps=16, per_sm=1, early_load=0)),
    "sp1_16k_w16_e16_h1": (_p(block=16384, num_warps=16, per_sm=1, keep_e=1, hint=1), None),
    "sp1_16k_w16_e16_h1_pf2": (_p(block=16384, num_warps=16, per_sm=1, keep_e=1, hint=1, l2_prefetch=2), None),
    "single_cs": ({"packed": False, "store_cs": True}, {"packed": False, "store_cs": True}),
    "single_1r": ({"packed": False, "one_row": True}, None),
    "single_1r_cs": ({"packed": False, "one_row": True, "store_cs": True}, None),
    "single_1r_w16_cs": ({"packed": False, "one_row": True, "store_cs": True, "num_warps": 16}, None),
    "single_w16_cs": (
        {"packed": False, "num_warps": 16, "store_cs": True},
        {"packed": False, "num_warps": 16, "store_cs": True},
    ),
    "pk_nowait": (_p(max_spins=0), _p(max_spins=0)),  # diagnostic: never wait (NaN rows), timed anyway
    # session 6: the exact-tile whole-row forward (solkit.kernels._softmax_rows), the packed grid filled
    "rows": ({"rows": {}}, {}),
    "rows_pf1": ({"rows": {"l2_prefetch": 1}}, None),
    "rows_g256": ({"rows": {"programs": 256}}, None),
    "rows_1sm_d3_g128": ({"rows": {"per_sm": 1, "depth": 3, "programs": 128}}, None),
    "sp1_g128": (_p(block=16384, num_warps=16, per_sm=1, keep_e=2, hint=1, groups=128), None),
    "rows_pf2": ({"rows": {"l2_prefetch": 2}}, None),
    "rows_d1": ({"rows": {"depth": 1}}, None),
    "rows_d1_pf1": ({"rows": {"depth": 1, "l2_prefetch": 1}}, None),
    "rows_h0": ({"rows": {"hint": 0}}, None),
    "rows_h2": ({"rows": {"hint": 2}}, None),
    "rows_1sm_d3": ({"rows": {"per_sm": 1, "depth": 3}}, {}),
    "rows_1sm_d3_pf1": ({"rows": {"per_sm": 1, "depth": 3, "l2_prefetch": 1}}, {}),
    "rows_1sm_d2": ({"rows": {"per_sm": 1, "depth": 2}}, None),
    "rows_4sm": ({"rows": {"per_sm": 4}}, {}),
    "rows_4sm_d3": ({"rows": {"per_sm": 4, "depth": 3}}, None),
    "rows_4sm_d1": ({"rows": {"per_sm": 4, "depth": 1}}, None),
    "rows_w4_4": ({"rows": {"num_warps": 4, "per_sm": 4}}, None),
    "rows_w4_4_d1": ({"rows": {"num_warps": 4, "per_sm": 4, "depth": 1}}, None),
    "rows_w4_6_d1": ({"rows": {"num_warps": 4, "per_sm": 6, "depth": 1}}, None),
    "pk_fill": (_p(fill=1), _p(fill=1)),
    "pk_nofill": (_p(fill=0), _p(fill=0)),
    # the round-2 TMA forwards as measured (the width a runtime argument, before static_width)
    "tma_w2_rt": (
        {"tma": {"blocks": 16, "num_warps": 2, "per_sm": 8, "stages": 3, "l2_prefetch": 1, "static_width": False}},
        None,
    ),  # the packed path as the session-5 default (before the 262144 fill)
    "pk_fill_h1": (_p(fill=1, hint=1), _p(fill=1, hint=1)),
    "tma": ({"tma": {}}, {}),
    "tma_s4": ({"tma": {"stages": 4}}, {}),
    "tma_s5": ({"tma": {"stages": 5}}, {}),
    "tma_s6": ({"tma": {"stages": 6}}, {}),
    "tma_s8": ({"tma": {"stages": 8}}, None),
    "tma_s5_h0": ({"tma": {"stages": 5, "hint": 0}}, None),
    "tma_3sm_s6": ({"tma": {"stages": 6, "per_sm": 3}}, None),
    "tma_b16_w8_2_s5": ({"tma": {"blocks": 16, "num_warps": 8, "per_sm": 2, "stages": 5}}, None),
    "tma_b32_w8_2_s3": ({"tma": {"blocks": 32, "num_warps": 8, "per_sm": 2, "stages": 3}}, {}),
    "tma_b32_w8_2_s4": ({"tma": {"blocks": 32, "num_warps": 8, "per_sm": 2, "stages": 4}}, {}),
    "tma_b32_w4_4_s3": ({"tma": {"blocks": 32, "num_warps": 4, "per_sm": 4, "stages": 3}}, None),
    "tma_b32_w4_2_s4": ({"tma": {"blocks": 32, "num_warps": 4, "per_sm": 2, "stages": 4}}, None),
    "tma_b8_w2_8_s4": ({"tma": {"blocks": 8, "num_warps": 2, "per_sm": 8, "stages": 4}}, None),
    "tma_b8_w2_8_s6": ({"tma": {"blocks": 8, "num_warps": 2, "per_sm": 8, "stages": 6}}, None),
    "tma_b64_w16_1_s3": ({"tma": {"blocks": 64, "num_warps": 16, "per_sm": 1, "stages": 3}}, None),
    "tma_b64_w16_1_s4": ({"tma": {"blocks": 64, "num_warps": 16, "per_sm": 1, "stages": 4}}, None),
    "tma_b64_w8_2_s3": ({"tma": {"blocks": 64, "num_warps": 8, "per_sm": 2, "stages": 3}}, None),
    # round 2 (session 6): one 8-warp rows program an SM with L2 prefetch, deeper; TMA at 32 words a thread
    "rows_1sm_d3_pf2": ({"rows": {"per_sm": 1, "depth": 3, "l2_prefetch": 2}}, None),
    "rows_1sm_d4_pf1": ({"rows": {"per_sm": 1, "depth": 4, "l2_prefetch": 1}}, {}),
    "rows_1sm_d4_pf2": ({"rows": {"per_sm": 1, "depth": 4, "l2_prefetch": 2}}, None),
    "rows_1sm_d2_pf1": ({"rows": {"per_sm": 1, "depth": 2, "l2_prefetch": 1}}, None),
    "rows_1sm_d2_pf2": ({"rows": {"per_sm": 1, "depth": 2, "l2_prefetch": 2}}, None),
    "rows_1sm_d3_pf1_h0": ({"rows": {"per_sm": 1, "depth": 3, "l2_prefetch": 1, "hint": 0}}, None),
    "rows_1sm_d4_pf1_h0": ({"rows": {"per_sm": 1, "depth": 4, "l2_prefetch": 1, "hint": 0}}, None),
    "rows_1sm_d3_pf1_g128": ({"rows": {"per_sm": 1, "depth": 3, "l2_prefetch": 1, "programs": 128}}, None),
    "rows_h0_pf1": ({"rows": {"hint": 0, "l2_prefetch": 1}}, None),
    "rows_d1_pf1_h0": ({"rows": {"depth": 1, "l2_prefetch": 1, "hint": 0}}, None),
    "sp1_pf2": (_p(block=16384, num_warps=16, per_sm=1, keep_e=2, hint=1, l2_prefetch=2), None),
    "sp1_h0": (_p(block=16384, num_warps=16, per_sm=1, keep_e=2, hint=0), None),
    "tma_b32_w4_4_s2": ({"tma": {"blocks": 32, "num_warps": 4, "per_sm": 4, "stages": 2}}, None),
    "tma_b32_w4_4_s4": ({"tma": {"blocks": 32, "num_warps": 4, "per_sm": 4, "stages": 4}}, None),
    "tma_b32_w4_4_s3_h0": ({"tma": {"blocks": 32, "num_warps": 4, "per_sm": 4, "stages": 3, "hint": 0}}, None),
    "tma_b32_w4_4_s3_g32": ({"tma": {"blocks": 32, "num_warps": 4, "per_sm": 4, "stages": 3, "groups": 32}}, None),
    "tma_b32_w4_4_s4_g32": ({"tma": {"blocks": 32, "num_warps": 4, "per_sm": 4, "stages": 4, "groups": 32}}, None),
    "tma_b16_w2_8_s3": ({"tma": {"blocks": 16, "num_warps": 2, "per_sm": 8, "stages": 3}}, None),
    "tma_b16_w2_8_s4": ({"tma": {"blocks": 16, "num_warps": 2, "per_sm": 8, "stages": 4}}, None),
    "tma256_fill": ({"tma": {"blocks": 32, "num_warps": 4, "per_sm": 4, "stages": 3}}, _p(fill=1)),
    "tma_pf1": ({"tma": {"l2_prefetch": 1}}, None),
    # 16 warps, 8-byte vectors: 14336 columns as (4 + 2 + 1) x 1024 words, 14 a thread, one program an SM
    "r16_d2": ({"rows": {"num_warps": 16, "vec": 2, "per_sm": 1, "depth": 2}}, None),
    "r16_d2_pf1": ({"rows": {"num_warps": 16, "vec": 2, "per_sm": 1, "depth": 2, "l2_prefetch": 1}}, {}),
    "r16_d3": ({"rows": {"num_warps": 16, "vec": 2, "per_sm": 1, "depth": 3}}, None),
    "r16_d3_pf1": ({"rows": {"num_warps": 16, "vec": 2, "per_sm": 1, "depth": 3, "l2_prefetch": 1}}, {}),
    "r16_d4": ({"rows": {"num_warps": 16, "vec": 2, "per_sm": 1, "depth": 4}}, None),
    "r16_d4_pf1": ({"rows": {"num_warps": 16, "vec": 2, "per_sm": 1, "depth": 4, "l2_prefetch": 1}}, {}),
    "r16_d3_pf2": ({"rows": {"num_warps": 16, "vec": 2, "per_sm": 1, "depth": 3, "l2_prefetch": 2}}, None),
    "r16_d3_pf1_h0": (
        {"rows": {"num_warps": 16, "vec": 2, "per_sm": 1, "depth": 3, "l2_prefetch": 1, "hint": 0}},
        None,
    ),
    "r16_2sm_d1": ({"rows": {"num_warps": 16, "vec": 2, "per_sm": 2, "depth": 1}}, None),
    "r16_2sm_d1_pf1": ({"rows": {"num_warps": 16, "vec": 2, "per_sm": 2, "depth": 1, "l2_prefetch": 1}}, None),
    "tma_b32_w4_4_s3_pf1": ({"tma": {"blocks": 32, "num_warps": 4, "per_sm": 4, "stages": 3, "l2_prefetch": 1}}, None),
    "tma_b32_w4_4_s3_g32_pf1": (
        {"tma": {"blocks": 32, "num_warps": 4, "per_sm": 4, "stages": 3, "groups": 32, "l2_prefetch": 1}},
        None,
    ),
    "tma_b16_w2_8_s3_pf1": ({"tma": {"blocks": 16, "num_warps": 2, "per_sm": 8, "stages": 3, "l2_prefetch": 1}}, None),
}
DIAG = {
    "pk_nowait",
    "e16_nowait",
    "ebf",
    "ebf_h1",
    "ebf_h2",
    "sp1_16k_w16_ebf_h1",
    "sp1_16k_w16_ebf_h2",
    "sp1_16k_d3_ebf_h1",
    "sp1_16k_ebf_h1_pf0",
    "sp1_16k_ebf_h1_late",
    "sp1_4k_ebf_h1",
    "sp1_4k_ebf_h2",
    "sp1_4k_w8_ebf_h1",
    "sp1_4k_w4_3_d3_ebf_h1",
}  # timed even when the check fails (the bf16 forms)
RIVALS = ("liger", "compile", "eager")
FLOORS = ("copy",)  # y.copy_(x) into a preallocated buffer at the same shape: the bare copy floor (no check)

#: Plans: (shape, [(variant, modes)]) in order; a plan runs until its time budget is spent.
ALL3 = ("fwd", "bwd", "fwdbwd")
PLANS = {
    "smoke": [("smoke", [("pk", ALL3), ("pk_e16", ("fwd",)), ("looped", ALL3), ("eager", ("fwd", "fwdbwd"))]),
              ("smoke_odd", [("pk", ALL3)])],
    "round1": [
        ("vocab8k", [("pk", ALL3), ("looped", ("fwd", "fwdbwd")), ("pk_e16", ("fwd",)), ("pk_pf0", ("fwd", "bwd")),
                     ("pk_pf2", ("fwd", "bwd")), ("pk_late", ("fwd", "bwd")), ("pk_2k_w2_8", ("fwd", "bwd")),
                     ("pk_2k_w4_4", ("fwd", "bwd")), ("pk_4k_w8_2", ("fwd", "bwd")), ("pk_8k_w8_2", ("fwd", "bwd")),
                     ("pk_4k_w4_3", ("fwd", "bwd")), ("pk_8k_w16_1", ("fwd", "bwd")), ("pk_fb", ("fwd", "bwd")),
                     ("pk_nowait", ("fwd", "bwd")), ("pk_d3_2k_w4_4", ("fwd",)), ("pk_d3_4k_w8_2", ("fwd",)),
                     ("pk_d3_4k_w4_3", ("fwd",)), ("pk_1k_w2_8", ("fwd", "bwd")), ("pk_s2_2k_w4_4", ("fwd",)),
                     ("pk_s2_4k_w4_3", ("fwd",)), ("pk_s2_4k_w8_2", ("fwd",))]),
        ("inter", [("default", ALL3), ("compile", ("fwd", "fwdbwd")), ("liger", ("fwd", "fwdbwd")), ("pk", ALL3),
                   ("pk_2k_w4_4", ("fwd", "bwd")), ("pk_2k_w2_8", ("fwd", "bwd")), ("pk_d3_2k_w4_4", ("fwd",)),
                   ("pk_1k_w2_8", ("fwd", "bwd")), ("pk_8k_w8_2", ("fwd", "bwd")), ("single_w16", ("fwd", "bwd")),
                   ("single_w8", ("fwd", "bwd")), ("eager", ("fwd", "fwdbwd"))]),
        ("vocab4k", [("pk", ("fwd", "bwd", "fwdbwd")), ("default", ("fwd", "fwdbwd")), ("pk_2k_w4_4", ("fwd", "bwd"))]),
        ("256k", [("pk", ("fwd", "bwd", "fwdbwd")), ("default", ("fwd", "fwdbwd")), ("pk_2k_w4_4", ("fwd", "bwd")),
                  ("pk_4k_w8_2", ("fwd", "bwd"))]),
    ],
}  # fmt: skip
R2_FWD = (
    "e16",
    "e16_h1",
    "e16_h2",
    "e16_late",
    "e16_pf0",
    "e16_pf2",
    "e16_2k_w2_8",
    "e16_8k_w8_2",
    "e16_s2_4k_w4_3",
    "e16_h1_pf2",
    "e16_nowait",
)
R2_FWD_ONLY = ("ebf", "ebf_h1")
PLANS["round2"] = [
    ("vocab8k", [("default", ALL3)] + [(v, ("fwd", "bwd")) for v in R2_FWD] + [(v, ("fwd",)) for v in R2_FWD_ONLY]
     + [("e16_h1", ("fwdbwd",)), ("looped", ("fwd", "fwdbwd"))]),
    ("inter", [("default", ALL3), ("single_1r", ("fwd",)), ("single_1r_cs", ("fwd",)), ("single_1r_w16_cs", ("fwd",)),
               ("single_cs", ("fwd", "bwd")), ("single_w16", ("fwd", "bwd")),
               ("single_w16_cs", ("fwd", "bwd")), ("liger", ("fwd",)), ("sp1_16k_w16", ("fwd", "bwd")),
               ("sp1_16k_w16_e16_h1", ("fwd",)), ("sp1_16k_w16_e16_h1_pf2", ("fwd",)),
               ("sp1_16k_w16_ebf_h1", ("fwd",)), ("e16_2k_w2_8", ("fwd", "bwd")),
               ("e16_h1", ("fwd", "bwd")), ("e16", ("fwd", "bwd")), ("compile", ("fwd", "fwdbwd"))]),
    ("256k", [("default", ALL3), ("split", ("fwd", "fwdbwd")), ("e16_h1", ("fwd", "bwd", "fwdbwd")),
              ("e16_2k_w2_8", ("fwd", "bwd")), ("e16_8k_w8_2", ("fwd", "bwd"))]),
    ("vocab4k", [("default", ALL3), ("looped", ("fwd", "fwdbwd")), ("e16_h1", ("fwd", "bwd", "fwdbwd"))]),
    ("vocab8k", [("compile", ("fwd", "fwdbwd"))]),  # last: compiles here if the warm-up process ran out of time
]  # fmt: skip
#: The table of record (round 3): the module defaults at every shape, the previous wide-row default, the rivals at
#: 14336 (Liger refuses rows over 65536; torch.compile at 128256 is in round 2: its compile alone takes ~15 s).
PLANS["record"] = [
    ("inter", [("default", ALL3), ("liger", ("fwd", "fwdbwd")), ("compile", ("fwd", "fwdbwd")),
               ("eager", ("fwd", "fwdbwd")), ("sp1_16k_w16_ebf_h2", ("fwd",))]),
    ("vocab8k", [("default", ALL3), ("looped", ("fwd", "fwdbwd")), ("ebf_h2", ("fwd",)), ("eager", ("fwd", "fwdbwd"))]),
    ("256k", [("default", ALL3), ("split", ("fwd", "fwdbwd"))]),
    ("vocab4k", [("default", ALL3)]),
    ("hidden", [("default", ("fwd", "fwdbwd"))]),
]  # fmt: skip
PLANS["round4"] = [
    ("hidden", [("default", ALL3), ("liger", ("fwd",)), ("single_cs", ("fwd", "bwd")), ("single_1r_cs", ("fwd",)),
                ("single_bm2_cs", ("fwd", "bwd")), ("sp1_4k_ebf_h1", ("fwd",)), ("sp1_4k_ebf_h2", ("fwd",)),
                ("sp1_4k_e16_h2", ("fwd",)), ("sp1_4k_w8_ebf_h1", ("fwd",)), ("sp1_4k_w4_3_d3_ebf_h1", ("fwd",)),
                ("default", ("fwd",))]),
    ("inter", [("default", ALL3), ("liger", ("fwd",)), ("sp1_16k_d3_ebf_h1", ("fwd",)),
               ("sp1_16k_ebf_h1_pf0", ("fwd",)), ("sp1_16k_ebf_h1_late", ("fwd",)), ("default", ("fwd",))]),
    ("vocab8k", [("default", ALL3), ("e16_h2_r3", ("fwd",)), ("default", ("fwd",))]),
    ("256k", [("default", ALL3)]),
    ("vocab4k", [("default", ALL3)]),
]  # fmt: skip
PLANS["s6r1"] = [
    ("inter", [("default", ("fwd", "fwdbwd")), ("rows", ("fwd", "fwdbwd")), ("copy", ("fwd",)), ("rows_pf1", ("fwd",)),
               ("rows_pf2", ("fwd",)), ("rows_d1", ("fwd",)), ("rows_d1_pf1", ("fwd",)), ("rows_h2", ("fwd",)),
               ("rows_h0", ("fwd",)), ("rows_1sm_d3", ("fwd", "fwdbwd")), ("rows_1sm_d3_pf1", ("fwd",)),
               ("rows_1sm_d2", ("fwd",)), ("rows_g256", ("fwd",)), ("rows_1sm_d3_g128", ("fwd",)),
               ("sp1_g128", ("fwd",)), ("tma_b64_w16_1_s3", ("fwd",)), ("tma_b64_w16_1_s4", ("fwd",)),
               ("tma_b64_w8_2_s3", ("fwd",)), ("liger", ("fwd",)), ("default", ("fwd",)), ("rows", ("fwd",)),
               ("copy", ("fwd",))]),
    ("vocab8k", [("default", ALL3), ("pk_fill", ALL3), ("tma", ("fwd", "fwdbwd")), ("tma_s4", ("fwd",)),
                 ("tma_s5", ("fwd", "fwdbwd")), ("tma_s6", ("fwd",)), ("tma_s8", ("fwd",)), ("tma_s5_h0", ("fwd",)),
                 ("tma_3sm_s6", ("fwd",)), ("tma_b16_w8_2_s5", ("fwd",)), ("tma_b32_w8_2_s3", ("fwd",)),
                 ("tma_b32_w8_2_s4", ("fwd",)), ("tma_b32_w4_4_s3", ("fwd",)), ("tma_b32_w4_2_s4", ("fwd",)),
                 ("tma_b8_w2_8_s4", ("fwd",)), ("tma_b8_w2_8_s6", ("fwd",)), ("pk_fill_h1", ("fwd",)),
                 ("copy", ("fwd",)), ("default", ("fwd",))]),
    ("256k", [("default", ALL3), ("pk_fill", ALL3), ("tma_s5", ("fwd",)), ("tma_s8", ("fwd",)),
              ("tma_b32_w8_2_s4", ("fwd",)), ("tma_b32_w4_4_s3", ("fwd",)), ("tma_b32_w4_2_s4", ("fwd",)),
              ("copy", ("fwd",))]),
    ("vocab4k", [("default", ("fwd", "fwdbwd")), ("pk_fill", ALL3), ("tma_s5", ("fwd",)),
                 ("tma_b32_w8_2_s4", ("fwd",)), ("copy", ("fwd",))]),
    ("hidden", [("default", ("fwd",)), ("rows", ("fwd",)), ("rows_4sm", ("fwd", "fwdbwd")), ("rows_4sm_d3", ("fwd",)),
                ("rows_4sm_d1", ("fwd",)), ("rows_w4_4", ("fwd",)), ("rows_w4_4_d1", ("fwd",)),
                ("rows_w4_6_d1", ("fwd",)), ("copy", ("fwd",)), ("liger", ("fwd",)), ("default", ("fwd", "fwdbwd"))]),
]  # fmt: skip
PLANS["smoke"].append(
    ("smoke_rows", [("rows", ("fwd",)), ("rows_d1", ("fwd",)), ("copy", ("fwd",)), ("pk_fill", ("fwd", "bwd"))])
)
_R2_ROWS = (
    "r16_d2",
    "r16_d2_pf1",
    "r16_d3",
    "r16_d3_pf1",
    "r16_d4",
    "r16_d4_pf1",
    "r16_d3_pf2",
    "r16_d3_pf1_h0",
    "r16_2sm_d1",
    "r16_2sm_d1_pf1",
    "rows_1sm_d3_pf1",
    "rows_1sm_d3_pf2",
    "rows_1sm_d4_pf1",
    "rows_1sm_d4_pf2",
    "rows_1sm_d2_pf1",
    "rows_1sm_d2_pf2",
    "rows_1sm_d3_pf1_h0",
    "rows_1sm_d4_pf1_h0",
    "rows_1sm_d3_pf1_g128",
    "rows_h0_pf1",
    "rows_d1_pf1_h0",
    "sp1_pf2",
    "sp1_h0",
)
_R2_256K = (
    "tma_b32_w4_4_s3",
    "tma_b32_w4_4_s2",
    "tma_b32_w4_4_s4",
    "tma_b32_w4_4_s3_h0",
    "tma_b64_w8_2_s3",
    "tma_b16_w2_8_s3",
    "tma_b16_w2_8_s4",
    "tma_b32_w4_4_s3_pf1",
)
_R2_VOCAB = (
    "tma_b16_w2_8_s3",
    "tma_b16_w2_8_s4",
    "tma_b32_w4_4_s3_g32",
    "tma_b32_w4_4_s4_g32",
    "tma_b32_w4_4_s3",
    "tma",
    "tma_b8_w2_8_s6",
    "tma_pf1",
    "tma_b32_w4_4_s3_g32_pf1",
    "tma_b16_w2_8_s3_pf1",
)
PLANS["s6r2"] = [
    ("inter", [("default", ("fwd", "fwdbwd")), ("copy", ("fwd",))] + [(v, ("fwd",)) for v in _R2_ROWS]
     + [("default", ("fwd",)), ("rows_1sm_d3_pf1", ("fwd", "fwdbwd")), ("rows_1sm_d4_pf1", ("fwd", "fwdbwd")),
        ("r16_d3_pf1", ("fwdbwd",)), ("r16_d4_pf1", ("fwdbwd",)), ("r16_d2_pf1", ("fwdbwd",))]
     + [(v, ("fwd",)) for v in _R2_ROWS[:18]] + [("default", ("fwd",)), ("liger", ("fwd",)), ("copy", ("fwd",))]),
    ("256k", [("default", ALL3), ("copy", ("fwd",))] + [(v, ("fwd",)) for v in _R2_256K]
     + [("pk_fill", ("bwd",)), ("tma256_fill", ("fwd", "bwd", "fwdbwd")), ("default", ("fwd", "bwd"))]
     + [(v, ("fwd",)) for v in _R2_256K] + [("tma256_fill", ("fwdbwd",))]),
    ("vocab8k", [("default", ("fwd",)), ("copy", ("fwd",))] + [(v, ("fwd",)) for v in _R2_VOCAB]
     + [("default", ("fwd",))] + [(v, ("fwd",)) for v in _R2_VOCAB[:4]]),
    ("vocab4k", [("default", ("fwd",)), ("tma_b16_w2_8_s3", ("fwd",)), ("tma_b32_w4_4_s3_g32", ("fwd",)),
                 ("tma_b32_w4_4_s3", ("fwd",)), ("tma_pf1", ("fwd",)), ("tma_b16_w2_8_s3_pf1", ("fwd",)),
                 ("default", ("fwd",))]),
    ("hidden", [("default", ("fwd", "fwdbwd")), ("liger", ("fwd",)), ("copy", ("fwd",)), ("r16_d2", ("fwd",)),
                ("r16_d3_pf1", ("fwd",)), ("default", ("fwd",))]),
]  # fmt: skip
#: Session 6's table of record (round 3): the module defaults at every shape (forward, backward alone, forward +
#: backward), the previous defaults (the one-chunk packed forward at 14336, the packed forward at vocabulary
#: widths), Liger and torch.compile (max-autotune, compiled in a warm-up process first) at 14336 and 4096 (at
#: 128256 torch.compile is session 5's round 2: its compile alone takes ~15 s; Liger refuses rows over 65536),
#: eager, and the bare copy at each shape.
PLANS["s6rec"] = [
    ("inter", [("default", ALL3), ("sp1_16k_w16_ebf_h1", ("fwd",)), ("rows_1sm_d3_pf1", ("fwd",)),
               ("liger", ("fwd", "fwdbwd")), ("compile", ("fwd", "fwdbwd")), ("eager", ("fwd",)), ("copy", ("fwd",)),
               ("default", ("fwd", "fwdbwd")), ("sp1_16k_w16_ebf_h1", ("fwd",))]),
    ("vocab8k", [("default", ALL3), ("pk", ("fwd",)), ("tma_w2_rt", ("fwd",)), ("copy", ("fwd",)),
                 ("default", ("fwd", "fwdbwd")), ("pk", ("fwd",)), ("tma_w2_rt", ("fwd",))]),
    ("256k", [("default", ALL3), ("pk_nofill", ALL3), ("copy", ("fwd",)), ("default", ("fwd", "bwd"))]),
    ("vocab4k", [("default", ALL3), ("pk", ("fwd",)), ("tma_w2_rt", ("fwd",)), ("copy", ("fwd",)),
                 ("default", ("fwd",))]),
    ("hidden", [("default", ALL3), ("liger", ("fwd",)), ("compile", ("fwd", "fwdbwd")), ("copy", ("fwd",)),
                ("default", ("fwd", "fwdbwd"))]),
]  # fmt: skip
COMPILE_SHAPES = {"round1": ("inter",), "round2": ("inter", "vocab8k"), "record": ("inter",),
                  "s6rec": ("inter", "hidden")}  # fmt: skip


def elapsed() -> float:
    return time.perf_counter() - T0


def log(msg: str) -> None:
    print(f"[{elapsed():6.1f}s] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------ callables
def solkit_fns(name: str):
    fo, bo = VARIANTS[name]
    fwd = (lambda x: softmax_forward(x, **fo)) if fo is not None else None
    bwd = (lambda dy, y: softmax_backward(dy, y, **bo)) if bo is not None else None
    return fwd, bwd


_COMPILED = {}


def rival_fns(name: str):
    """(forward, forward+backward through autograd) of a rival."""
    if name == "liger":
        from liger_kernel.ops import LigerSoftmaxFunction

        f = LigerSoftmaxFunction.apply
    elif name == "compile":
        if "f" not in _COMPILED:
            _COMPILED["f"] = torch.compile(lambda x: torch.softmax(x, -1), dynamic=False,
                                           mode="max-autotune-no-cudagraphs")  # fmt: skip
        f = _COMPILED["f"]
    else:
        f = lambda x: torch.softmax(x, -1)  # noqa: E731

    def fwdbwd(x, dy):
        xg = x.detach().requires_grad_()
        return torch.autograd.grad(f(xg), xg, dy)[0]

    return f, fwdbwd


def run_mode(name: str, mode: str, x, dy, y_in):
    """The variant's output for a mode: y (fwd), dx from the given y (bwd), dx (fwdbwd)."""
    if name in RIVALS:
        f, fb = rival_fns(name)
        if mode == "fwd":
            with torch.no_grad():
                return f(x)
        if mode == "fwdbwd":
            return fb(x, dy)
        return None
    fwd, bwd = solkit_fns(name)
    if mode == "fwd":
        return fwd(x)
    if mode == "bwd":
        return bwd(dy, y_in)
    return bwd(dy, fwd(x)) if fwd is not None and bwd is not None else None


_COPY_DST: dict = {}


def timed(name: str, mode: str):
    if name in FLOORS:

        def copy(x, dy, y):
            if id(x) not in _COPY_DST:
                _COPY_DST[id(x)] = torch.empty_like(x)
            return _COPY_DST[id(x)].copy_(x)

        return copy
    if name in RIVALS:
        f, fb = rival_fns(name)
        if mode == "fwd":

            def run(x, dy, y):
                with torch.no_grad():
                    return f(x)

            return run
        return lambda x, dy, y: fb(x, dy)
    fwd, bwd = solkit_fns(name)
    if mode == "fwd":
        return lambda x, dy, y: fwd(x)
    if mode == "bwd":
        return lambda x, dy, y: bwd(dy, y)
    return lambda x, dy, y: bwd(dy, fwd(x))


# ----------------------------------------------------------------------------------------------- reference
class Reference:
    """A shape's inputs and float64 references: y, dx (from x) and dx from the bf16-rounded y (bwd mode),
    and eager PyTorch's own bf16 errors against them."""

    def __init__(self, shape, dtype, device, seed=0):
        gen = torch.Generator(device=device).manual_seed(seed)
        self.x = torch.randn(*shape, device=device, dtype=dtype, generator=gen) * 4
        self.dy = torch.randn(*shape, device=device, dtype=dtype, generator=gen)
        y64 = torch.softmax(self.x.double(), -1)
        d64 = self.dy.double()
        self.y64 = y64
        self.dx64 = y64 * (d64 - (y64 * d64).sum(-1, keepdim=True))
        self.y_in = torch.softmax(self.x, -1)  # the y given to the backward alone (bf16)
        yb = self.y_in.double()
        self.dxb64 = yb * (d64 - (yb * d64).sum(-1, keepdim=True))
        xe = self.x.clone().requires_grad_()
        ye = torch.softmax(xe, -1)
        (dxe,) = torch.autograd.grad(ye, xe, self.dy)
        dxe_b = torch._softmax_backward_data(self.dy, self.y_in, -1, dtype)
        self.torch_err = {"fwd": _err(ye.detach(), y64), "fwdbwd": _err(dxe, self.dx64), "bwd": _err(dxe_b, self.dxb64)}
        self.ref = {"fwd": y64, "fwdbwd": self.dx64, "bwd": self.dxb64}
        self.ref_max = {k: float(v.abs().max()) for k, v in self.ref.items()}
        del xe, ye, dxe, dxe_b


def _err(out, ref64) -> float:
    return float((out.double() - ref64).abs().max())


def check(name, mode, ref: Reference) -> dict:
    if ref.x.is_cuda:  # poison the allocator's free blocks: an unwritten element shows as NaN
        t = torch.empty(3 * ref.x.numel() * ref.x.element_size(), dtype=torch.uint8, device=ref.x.device)
        t.fill_(255)
        del t
    out = run_mode(name, mode, ref.x, ref.dy, ref.y_in)
    if out is None:
        return {"ok": False, "error": "mode not available"}
    r = ref.ref[mode]
    nonfinite = not bool(torch.isfinite(out).all())
    diff = (out.double() - r).abs()
    err = float(diff.max())
    row_err = diff.amax(-1)
    budget = 2 * ref.torch_err[mode] + 1e-3 * ref.ref_max[mode]
    bad_rows = int((row_err > budget).sum()) + int((~torch.isfinite(out)).any(-1).sum())
    rel = float((out.double() - r).norm() / r.norm())
    return {"ok": (not nonfinite) and err <= budget, "max_abs_err": err, "err_budget": budget, "bad_rows": bad_rows,
            "torch_err": ref.torch_err[mode], "rel_l2_err": rel, "nonfinite": nonfinite}  # fmt: skip


def sol_cols(nbytes, ms, bw) -> dict:
    out = {"achieved_TBps": nbytes / (ms * 1e-3) / 1e12}
    for basis, b in (("calibrated", bw), ("datasheet", DATASHEET_BW)):
        if b:
            res = t_sol({}, nbytes, Ceilings("h200", basis, {}, b))
            score = sol_fraction(res.t_sol_s, ms * 1e-3)
            out[f"t_sol_ms_{basis}"] = res.t_sol_ms
            out[f"sol_{basis}"] = score.sol_fraction
            out[f"violation_{basis}"] = score.violation
    return out


def launch_facts(name, mode, ref) -> dict:
    """The packed launcher's facts (split, groups, registers, spills) for a solkit packed variant."""
    from solkit.kernels import _softmax_packed as sp

    fo, bo = VARIANTS.get(name, (None, None))
    opts = fo if mode == "fwd" else bo
    if opts and isinstance(opts.get("tma"), dict) and mode == "fwd":
        from solkit.kernels._softmax_tma import softmax_forward_tma

        try:
            x = ref.x[:64]
            return softmax_forward_tma(x, torch.empty_like(x), **opts["tma"]) or {}
        except Exception as exc:  # noqa: BLE001
            return {"facts_error": str(exc)[:200]}
    if opts and isinstance(opts.get("rows"), dict) and mode == "fwd":
        from solkit.kernels._softmax_rows import softmax_forward_rows

        try:
            x = ref.x[:64]
            return softmax_forward_rows(x, torch.empty_like(x), **opts["rows"]) or {}
        except Exception as exc:  # noqa: BLE001
            return {"facts_error": str(exc)[:200]}
    if not opts or not isinstance(opts.get("packed"), dict):
        return {}
    try:
        x = ref.x[:64]
        if mode == "fwd":
            return sp.softmax_forward_packed(x, torch.empty_like(x), **opts["packed"]) or {}
        return sp.softmax_backward_packed(ref.dy[:64], ref.y_in[:64], torch.empty_like(x), **opts["packed"]) or {}
    except Exception as exc:  # noqa: BLE001
        return {"facts_error": str(exc)[:200]}


# ------------------------------------------------------------------------------------------------ main
def measure_copy(device, timing_kw) -> tuple[float, dict]:
    """Copy bandwidth (read + write bytes per second) of a 1 GiB ``copy_``, CUDA events (as ``solkit calibrate``)."""
    n = 2**29
    src = torch.randn(n, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    for _ in range(40):
        dst.copy_(src)
    res = benchmark(lambda: dst.copy_(src), **{**timing_kw, "method": "events", "reps": 30})
    bw = 2 * src.numel() * 2 / (res.median_ms * 1e-3)
    return bw, res.to_dict()


def warm(part: str, device, plan: str) -> None:
    """Compile (Triton cache) the solkit variants of a plan on a few rows of each shape."""
    k, n = (int(v) for v in part.split("/"))
    jobs = sorted({(s, v, m) for s, vs in PLANS[plan] for v, ms in vs for m in ms if v not in RIVALS + FLOORS})
    for s, v, m in jobs[k::n]:
        rows, cols = SHAPES[s]
        x = torch.randn(min(rows, 528), cols, device=device, dtype=torch.bfloat16)
        try:
            run_mode(v, m, x, torch.randn_like(x), torch.softmax(x, -1))
        except Exception as exc:  # noqa: BLE001
            print(f"warm {s} {v} {m}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    torch.cuda.synchronize()
    log(f"warm {part}: {len(jobs[k::n])} done")


def warm_compile(device, plan: str) -> None:
    """torch.compile (max-autotune) of the plan's rival shapes, forward and forward + backward, alone on the GPU."""
    for s in COMPILE_SHAPES.get(plan, ()):
        x = torch.randn(*SHAPES[s], device=device, dtype=torch.bfloat16)
        run_mode("compile", "fwd", x, torch.randn_like(x), None)
        run_mode("compile", "fwdbwd", x, torch.randn_like(x), None)
        torch.cuda.synchronize()
        log(f"compiled {s}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plan", default="round1", choices=sorted(PLANS))
    p.add_argument("--out", default="")
    p.add_argument("--budget-s", type=float, default=1e9)
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--warm", default="")
    p.add_argument("--warm-compile", action="store_true")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--command", default=" ".join(sys.argv))
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.warm:
        warm(args.warm, device, args.plan)
        return 0
    if args.warm_compile:
        warm_compile(device, args.plan)
        return 0
    timing_kw = (dict(method="wall", reps=2, trials=1, warmup=1) if device.type != "cuda"
                 else dict(method="auto", reps=args.reps, trials=3, warmup=3, calls_per_graph=10,
                           l2_flush_mode="read"))  # fmt: skip
    doc = {"benchmark": "kernels_softmax_wide", "plan": args.plan, "command": args.command,
           "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "device": torch.cuda.get_device_name(0) if device.type == "cuda" else platform.processor(),
           "versions": {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version()},
           "timing": timing_kw, "dtype": "bfloat16", "rows": []}  # fmt: skip
    try:
        import liger_kernel  # noqa: F401

        doc["versions"]["liger_kernel"] = getattr(liger_kernel, "__version__", "0.8.5")
    except ImportError:
        pass

    def flush():
        doc["elapsed_s"] = round(elapsed(), 1)
        if args.out:
            with open(args.out + ".tmp", "w") as fh:
                json.dump(doc, fh, indent=1, default=str)
            os.replace(args.out + ".tmp", args.out)

    bw = 0.0
    if device.type == "cuda":
        bw, info = measure_copy(device, timing_kw)
        doc["copy_bandwidth_Bps"], doc["copy_timing"] = bw, info
        log(f"copy bandwidth {bw / 1e12:.3f} TB/s")
    flush()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float16
    for shape_name, variants in PLANS[args.plan]:
        if elapsed() > args.budget_s:
            break
        shape = SHAPES[shape_name]
        ref = Reference(shape, dtype, device)
        e = ref.x.element_size()
        M, N = shape
        pool = [(torch.randn(*shape, device=device, dtype=dtype) * 4, torch.randn(*shape, device=device, dtype=dtype))
                for _ in range(2)]  # fmt: skip
        pool = [(x, dy, torch.softmax(x, -1)) for x, dy in pool]
        _COPY_DST.clear()
        for name, modes in variants:
            for mode in modes:
                if elapsed() > args.budget_s:
                    break
                nbytes = {"fwd": 2, "bwd": 3, "fwdbwd": 5}[mode] * M * N * e
                row = {"shape_name": shape_name, "shape": [M, N], "variant": name, "mode": mode, "bytes": nbytes,
                       "options": VARIANTS.get(name, (None, None))[0 if mode == "fwd" else 1] if name in VARIANTS
                       else name}  # fmt: skip
                t = time.perf_counter()
                try:
                    if name in FLOORS:
                        row.update({"ok": None, "floor": True})
                    else:
                        row.update(check(name, mode, ref))
                    if (row["ok"] or name in DIAG or name in FLOORS) and device.type == "cuda":
                        res = benchmark(timed(name, mode), pool, **timing_kw)
                        row.update({"median_ms": res.median_ms, "q1_ms": res.q1_ms, "q3_ms": res.q3_ms, "cv": res.cv,
                                    "method": res.method, "l2_flush_mode": timing_kw.get("l2_flush_mode"),
                                    **sol_cols(nbytes, res.median_ms, bw)})  # fmt: skip
                        row["launch"] = launch_facts(name, mode, ref)
                except Exception as exc:  # noqa: BLE001 - a failing variant is a row, never a crash
                    row.update({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
                    traceback.print_exc(limit=2)
                row["wall_s"] = round(time.perf_counter() - t, 2)
                doc["rows"].append(row)
                flush()
                ms = row.get("median_ms", float("nan"))
                log(f"{shape_name:8s} {name:12s} {mode:6s} ok={row.get('ok')} ms={ms:.4f} "
                    f"sol={row.get('sol_calibrated', float('nan')):.3f} err={row.get('max_abs_err', float('nan')):.2e}"
                    f"/{row.get('err_budget', float('nan')):.2e} {row.get('error', '')[:100]}")  # fmt: skip
        del ref, pool
        if device.type == "cuda":
            torch.cuda.empty_cache()
    flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
