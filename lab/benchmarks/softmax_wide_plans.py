"""Variants and plans of ``lab/benchmarks/kernels_softmax_wide.py``: solkit launch settings by name, and per plan the
shapes and (variant, modes) timed in order."""

from __future__ import annotations

SHAPES = {"vocab8k": (8192, 128256), "vocab4k": (4096, 128256), "256k": (1024, 262144), "inter": (8192, 14336),
          "hidden": (8192, 4096), "smoke": (5, 1030), "smoke_odd": (3, 1031), "smoke_rows": (5, 14336),
          "smoke_rr": (5, 2048)}  # fmt: skip


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
    # session 6: the exact-tile whole-row forward (solkit.kernels.softmax.rows), the packed grid filled
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


# ----------------------------------------------------------------------------------------- session 7: re-read
def _rr(blocks, warps, per_sm, stages, skew, tma="11", ev="00", pf=0, tst=0) -> str:
    """Register a re-read forward variant (:mod:`solkit.kernels.softmax.reread`) and return its name:
    ``rr_b{blocks}_w{warps}_{per_sm}_s{stages}_k{skew}[_t{tma1}{tma2}][_e{ev1}{ev2}][_pf{pf}][_ts]`` (``_ts``: TMA
    stores)."""
    name = f"rr_b{blocks}_w{warps}_{per_sm}_s{stages}_k{skew}"
    name += (f"_t{tma}" if tma != "11" else "") + (f"_e{ev}" if ev != "00" else "") + (f"_pf{pf}" if pf else "")
    name += "_ts" if tst else ""
    opts = {"blocks": blocks, "num_warps": warps, "per_sm": per_sm, "stages": stages, "skew": skew,
            "tma1": int(tma[0]), "tma2": int(tma[1]), "ev1": int(ev[0]), "ev2": int(ev[1]),
            "l2_prefetch": pf, "tstore": tst}  # fmt: skip
    VARIANTS[name] = ({"reread": opts}, None)
    return name


FWD = ("fwd",)
#: Round 1 (a71.sh): the re-read forward around 4096-column chunks on 4-warp programs, 4 an SM (no spills, 104-126
#: registers, 16-33 KB of shared memory a program with Triton 3.6 for sm_90, compiled offline).
_A71_VOCAB = [
    _rr(16, 4, 4, 3, 1), _rr(16, 4, 4, 3, 2), _rr(16, 4, 4, 3, 3), _rr(16, 4, 4, 4, 1), _rr(16, 4, 4, 2, 1),
    _rr(16, 4, 4, 3, 1, "10"), _rr(16, 4, 4, 3, 1, "00"), _rr(16, 4, 4, 3, 1, "00", "12"), _rr(16, 4, 4, 3, 2, "00"),
    _rr(16, 4, 5, 3, 1), _rr(16, 4, 6, 3, 1), _rr(16, 2, 6, 3, 1), _rr(8, 2, 8, 3, 1), _rr(8, 2, 8, 4, 2),
    _rr(8, 2, 8, 4, 1), _rr(8, 2, 8, 3, 1, "00"), _rr(8, 2, 10, 3, 1), _rr(8, 2, 12, 3, 1), _rr(32, 8, 2, 3, 1),
    _rr(16, 4, 4, 3, 1, pf=1), _rr(16, 8, 2, 4, 1), _rr(8, 1, 16, 2, 1), _rr(8, 2, 8, 3, 2), _rr(8, 2, 8, 3, 1, "10"),
    _rr(16, 4, 4, 3, 2, "10"), _rr(16, 4, 5, 3, 2), _rr(16, 4, 4, 3, 1, tst=1), _rr(16, 4, 4, 3, 2, tst=1),
    _rr(8, 2, 8, 3, 1, tst=1), _rr(16, 4, 5, 3, 1, tst=1), _rr(8, 2, 8, 3, 2, tst=1),
]  # fmt: skip
_A71_4K = [_rr(16, 4, 4, 3, 1), _rr(16, 4, 4, 3, 2), _rr(16, 4, 6, 3, 1), _rr(8, 2, 8, 3, 1), _rr(8, 2, 10, 3, 1),
           _rr(16, 4, 4, 3, 1, "00"), _rr(16, 4, 4, 3, 1, tst=1)]  # fmt: skip
_A71_256K = [_rr(32, 8, 2, 3, 1), _rr(32, 4, 3, 3, 1), _rr(16, 4, 4, 3, 1), _rr(16, 4, 6, 3, 1), _rr(8, 2, 8, 3, 1),
             _rr(16, 4, 4, 3, 2), _rr(16, 4, 4, 3, 1, tst=1)]  # fmt: skip
_D = [("default", FWD), ("copy", FWD)]
# diagnostics (NaN rows, timed anyway): never wait for the partners' statistics
VARIANTS["rr_nowait"] = ({"reread": {"max_spins": 0}}, None)
VARIANTS["tma_w2_nowait"] = (
    {"tma": {"blocks": 16, "num_warps": 2, "per_sm": 8, "stages": 3, "l2_prefetch": 1, "max_spins": 0}},
    None,
)
DIAG.update({"rr_nowait", "tma_w2_nowait"})
# the lead's early probes (17:35 UTC): the TMA forward at 24 groups (8 an SM by registers) / 6 programs an SM
VARIANTS["tma_g24"] = ({"tma": {"blocks": 16, "num_warps": 2, "per_sm": 8, "stages": 3, "l2_prefetch": 1,
                                "groups": 24}}, None)  # fmt: skip
VARIANTS["tma_pw6"] = ({"tma": {"blocks": 16, "num_warps": 2, "per_sm": 6, "stages": 3, "l2_prefetch": 1}}, None)
VARIANTS["tma256_pw3"] = ({"tma": {"blocks": 32, "num_warps": 4, "per_sm": 3, "stages": 3, "l2_prefetch": 1}}, None)
for _n, _extra in (
    ("w1", {"word1": 1}),
    ("w1b", {"word1": 1, "backoff": 100}),
    ("w2", {"word1": 2}),
    ("w2b", {"word1": 2, "backoff": 100}),
):  # one-word partials (2: one polling thread each), back-off
    VARIANTS[f"tma_g24_{_n}"] = ({"tma": {**VARIANTS["tma_g24"][0]["tma"], **_extra}}, None)
    VARIANTS[f"tma_pw6_{_n}"] = ({"tma": {**VARIANTS["tma_pw6"][0]["tma"], **_extra}}, None)
VARIANTS["rr_w1"] = ({"reread": {"word1": 1}}, None)
_T = [("tma_g24", FWD), ("tma_pw6", FWD), ("tma_g24_w1", FWD), ("tma_pw6_w1", FWD), ("tma_g24_w1b", FWD),
      ("tma_pw6_w1b", FWD), ("tma_g24_w2", FWD), ("tma_pw6_w2", FWD), ("tma_g24_w2b", FWD), ("tma_pw6_w2b", FWD),
      ("rr_w1", FWD)]  # fmt: skip
PLANS["a71"] = [
    (
        "vocab8k",
        _D
        + _T
        + [(v, FWD) for v in _A71_VOCAB]
        + [("default", FWD), ("rr_nowait", FWD), ("tma_w2_nowait", FWD)]
        + [(v, FWD) for v in _A71_VOCAB]
        + _T
        + _D,
    ),
    ("vocab4k", _D + _T + [(v, FWD) for v in _A71_4K] + [("default", FWD)]),
    ("256k", _D + [("tma256_pw3", FWD)] + [(v, FWD) for v in _A71_256K] + [("default", FWD)]),
    ("inter", _D + [(_rr(16, 4, 4, 3, 1), FWD), (_rr(8, 2, 8, 3, 1), FWD), (_rr(32, 8, 2, 3, 1), FWD),
                    (_rr(16, 4, 4, 3, 2, tst=1), FWD), ("default", FWD)]),
]  # fmt: skip
PLANS["smoke"].append(
    ("smoke_rr", [(_rr(2, 1, 4, 3, 1), FWD), (_rr(2, 1, 4, 3, 2, "00", "12"), FWD), (_rr(2, 1, 4, 3, 1, tst=1), FWD)])
)

# Round 2 (a72.sh): the TMA forward around the round-1 winner (now TMA_DEFAULT at 65537-196607: 4096-column chunks
# on 2-warp programs, 6 an SM, one-word partials polled by one thread, 100 ns back-off; 262144: 3 an SM), against
# the session-6 default; back-off, programs an SM, groups, stages, 8192-column chunks.
_W2 = {"word1": 2, "backoff": 100}
_PW6 = {"blocks": 16, "num_warps": 2, "per_sm": 6, "stages": 3, "l2_prefetch": 1}
_PW3 = {"blocks": 32, "num_warps": 4, "per_sm": 3, "stages": 3, "l2_prefetch": 1}
VARIANTS["tma_s6"] = VARIANTS["tma_b16_w2_8_s3_pf1"]  # the session-6 default at 65537-196607 columns
VARIANTS["tma256_s6"] = VARIANTS["tma_b32_w4_4_s3_pf1"]  # ... at 196608-524288
for _bo in (30, 60, 200, 400, 1000):
    VARIANTS[f"tma_pw6_w2_bo{_bo}"] = ({"tma": {**_PW6, "word1": 2, "backoff": _bo}}, None)
VARIANTS["tma_pw5_w2b"] = ({"tma": {**_PW6, **_W2, "per_sm": 5}}, None)
VARIANTS["tma_pw6g22_w2b"] = ({"tma": {**_PW6, **_W2, "groups": 22}}, None)
VARIANTS["tma_pw6g23_w2b"] = ({"tma": {**_PW6, **_W2, "groups": 23}}, None)
VARIANTS["tma_pw7g24_w2b"] = ({"tma": {**_PW6, **_W2, "per_sm": 7, "groups": 24}}, None)
VARIANTS["tma_pw6s2_w2b"] = ({"tma": {**_PW6, **_W2, "stages": 2}}, None)
VARIANTS["tma_pw6s4_w2b"] = ({"tma": {**_PW6, **_W2, "stages": 4}}, None)
VARIANTS["tma_b32pw3_w2b"] = ({"tma": {**_PW3, **_W2}}, None)  # 8192-column chunks at 128256: 16 x 24 groups
VARIANTS["tma256_pw3_w2b"] = ({"tma": {**_PW3, **_W2}}, None)
VARIANTS["tma256_pw3_w2"] = ({"tma": {**_PW3, "word1": 2}}, None)
VARIANTS["tma256_b16pw6_w2b"] = ({"tma": {**_PW6, **_W2}}, None)  # 4096-column chunks at 262144: 64 x 12 groups
_A72_VOCAB = ["tma_pw6_w2", "tma_pw6_w2_bo30", "tma_pw6_w2_bo60", "tma_pw6_w2_bo200", "tma_pw6_w2_bo400",
              "tma_pw6_w2_bo1000", "tma_pw5_w2b", "tma_pw6g22_w2b", "tma_pw6g23_w2b", "tma_pw7g24_w2b", "tma_pw6s2_w2b",
              "tma_pw6s4_w2b", "tma_b32pw3_w2b", "tma_pw6"]  # fmt: skip
_S6 = [("default", FWD), ("tma_s6", FWD)]
PLANS["a72"] = [
    ("vocab8k", _S6 + [("copy", FWD)] + [(v, FWD) for v in _A72_VOCAB] + _S6 + [(v, FWD) for v in _A72_VOCAB[:6]]
     + _S6 + [("copy", FWD)]),
    ("vocab4k", _S6 + [("copy", FWD), ("tma_pw6_w2", FWD), ("tma_pw6_w2_bo200", FWD), ("tma_pw6", FWD)] + _S6),
    ("256k", [("default", FWD), ("tma256_s6", FWD), ("copy", FWD), ("tma256_pw3_w2b", FWD), ("tma256_pw3_w2", FWD),
              ("tma256_b16pw6_w2b", FWD), ("default", FWD), ("tma256_s6", FWD), ("tma256_pw3_w2b", FWD)]),
    ("inter", [("default", FWD), ("copy", FWD), ("default", FWD)]),
    ("hidden", [("default", FWD), ("copy", FWD), ("default", FWD)]),
]  # fmt: skip
#: Session 7's table of record (round 3): the module defaults at every shape (forward, backward alone, forward +
#: backward), the session-6 defaults (TMA-staged packed) timed next to them at vocabulary widths, Liger and
#: torch.compile (max-autotune, compiled in a warm-up process first) at 14336 and 4096, eager, the bare copy.
_S6_128 = "tma_b16_w2_8_s3_pf1"  # the session-6 default at 65537-196607 columns
_S6_256 = "tma_b32_w4_4_s3_pf1"  # ... at 196608-524288
# A/B beside the defaults: at 65537-196607 the round-1 default (3 stages), at 262144 4096-column chunks x 6 an SM
# with the one-word exchange (round 2: 269.1 us) and 2 stages
_R1 = "tma_pw6_w2_s3"
VARIANTS[_R1] = ({"tma": {**_PW6, **_W2}}, None)
VARIANTS["tma256_pw3s2"] = ({"tma": {**_PW3, "stages": 2}}, None)
PLANS["a7rec"] = [
    ("inter", [("default", ALL3), ("liger", ("fwd", "fwdbwd")), ("compile", ("fwd", "fwdbwd")), ("eager", FWD),
               ("copy", FWD), ("default", ("fwd", "fwdbwd"))]),
    ("vocab8k", [("default", ALL3), (_R1, FWD), (_S6_128, FWD), ("copy", FWD), ("default", ("fwd", "fwdbwd")),
                 (_R1, FWD), (_S6_128, FWD), ("default", FWD), (_R1, FWD), ("default", FWD)]),
    ("256k", [("default", ALL3), ("tma256_b16pw6_w2b", FWD), ("tma256_pw3s2", FWD), (_S6_256, FWD), ("copy", FWD),
              ("default", ("fwd", "fwdbwd")), ("tma256_b16pw6_w2b", FWD), ("tma256_pw3s2", FWD), ("default", FWD)]),
    ("vocab4k", [("default", ALL3), (_R1, FWD), (_S6_128, FWD), ("copy", FWD), ("default", ("fwd", "fwdbwd")),
                 (_R1, FWD)]),
    ("hidden", [("default", ALL3), ("liger", FWD), ("compile", ("fwd", "fwdbwd")), ("copy", FWD),
                ("default", ("fwd", "fwdbwd"))]),
]  # fmt: skip
COMPILE_SHAPES["a7rec"] = ("inter", "hidden")
#: lead26 (session 7): the shapes whose first timed row ran slow in a73 (8192x4096, 1024x262144), each solkit and
#: Liger forward timed three times, interleaved, so every variant's score can be the median of its samples.
PLANS["s7rep"] = [
    ("hidden", [("default", FWD), ("liger", FWD), ("copy", FWD), ("default", FWD), ("liger", FWD), ("copy", FWD),
                ("default", FWD), ("liger", FWD)]),
    ("256k", [("default", FWD), ("copy", FWD), ("default", FWD), ("copy", FWD), ("default", FWD)]),
]  # fmt: skip
COMPILE_SHAPES["s7rep"] = ()
