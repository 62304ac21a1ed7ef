"""gemm/configs.yaml as the GEMM launcher reads it: the validated table of tile configs per architecture family
and M regime, and the turning of one entry into a ``triton.Config`` with the keys it may leave out filled in.
Also the M bucketing and the pruning that bound which configs the autotuner times for an M."""

from __future__ import annotations

import functools
from typing import Any

import triton

from solkit.errors import SolkitError
from solkit.kernels.common import tuned
from solkit.kernels.common.device import interpreting
from solkit.kernels.gemm.decode import KNOB_DEFAULTS
from solkit.tune.space import config_key

ACTIVATIONS = {"none": 0, "silu": 1, "gelu_tanh": 2}
KERNELS = ("tma_persistent", "pointer", "splitk")
#: kernels on TMA tensor descriptors (aligned bf16/fp16 operands only)
TMA_KERNELS = ("tma_persistent",)
FAMILIES = ("hopper", "ampere", "interpreter")


@functools.lru_cache(maxsize=1)
def load_config_table() -> dict[str, Any]:
    """gemm/configs.yaml through :func:`solkit.kernels.common.tuned.load`, validated (families, regimes, kernel
    names), with the ``dispatch`` entry's limits (decode_max_m, m_bucket_cap) at the top level."""
    table = tuned.load("gemm")
    table = {**table.pop("dispatch"), **table}
    for family in FAMILIES:
        for regime in ("prefill", "decode"):
            entry = table.get(family, {}).get(regime)
            if not entry or entry.get("kernel") not in KERNELS or not entry.get("autotune"):
                raise SolkitError(
                    f"gemm/configs.yaml: {family}.{regime} needs kernel ({', '.join(KERNELS)}) and autotune"
                )
            for cfg in entry["autotune"] + entry.get("candidates", []):
                if cfg.get("kernel", entry["kernel"]) not in KERNELS:
                    raise SolkitError(
                        f"gemm/configs.yaml: {family}.{regime}: kernel must be one of {', '.join(KERNELS)}"
                    )
            if any("kernel" in cfg and cfg["kernel"] != entry["kernel"] for cfg in entry["autotune"]):
                raise SolkitError(
                    f"gemm/configs.yaml: {family}.{regime}.autotune entries must all use {entry['kernel']}"
                )
    return table


#: tma_persistent keys a config may leave out.
TMA_DEFAULTS = {
    "EPI_SUBTILE": 1, "FLATTEN": True, "WARP_SPEC": False, "PREFETCH_RES": 0, "PF_DIST": 0, "Y_EVICT_FIRST": False,
    "LD_DIST": 0,
}  # fmt: skip
#: splitk keys a config may leave out (GROUP_M means nothing there and is dropped); the decode knobs'
#: defaults are the launcher's own, so a config that omits them compiles (compile_for) and runs the same.
SPLITK_DEFAULTS = {"SPLIT_K": 1, "PIPE": 1, **KNOB_DEFAULTS}


#: Keys of a YAML config entry that are not kernel parameters.
META_KEYS = ("kernel", "num_warps", "num_stages", "m_min", "m_max")


def to_triton_config(cfg: dict[str, Any], kernel: str | None = None) -> triton.Config:
    """A YAML entry as a triton.Config (its m_min / m_max are kept by the autotuner, in M_RANGES)."""
    params = {k: v for k, v in cfg.items() if k not in META_KEYS}
    if cfg.get("kernel", kernel) == "tma_persistent":
        params = {**TMA_DEFAULTS, **params}
        if interpreting() and params["PREFETCH_RES"] in (1, 2, 4, 6):
            # inline PTX (the L2 prefetch) does not run in the interpreter; 4 / 6 without it are 3's / 7's code
            params["PREFETCH_RES"] = {1: 0, 2: 0, 4: 3, 6: 7}[params["PREFETCH_RES"]]
        if interpreting() and params["PREFETCH_RES"] >= 8:
            params["PF_DIST"] = 0  # 8's loads without its L2 prefetch
    elif cfg.get("kernel", kernel) == "splitk":
        params = {**SPLITK_DEFAULTS, **{k: v for k, v in params.items() if k != "GROUP_M"}}
    return triton.Config(params, num_warps=int(cfg.get("num_warps", 4)), num_stages=int(cfg.get("num_stages", 3)))


def m_range(cfg: dict[str, Any]) -> tuple[int, int]:
    """(m_min, m_max) of a config: the M buckets the autotuner times it for (open where left out)."""
    return int(cfg.get("m_min", 0)), int(cfg.get("m_max", 2**62))


#: (m_min, m_max) of the autotune lists' configs, by content (range_key). Not an attribute on the
#: Config, nor by id(): triton's disk cache rebuilds configs with Config(**config.__dict__), which an
#: extra attribute breaks, and solkit.tune hands the pruner configs rebuilt from its own dicts.
M_RANGES: dict[str, tuple[int, int]] = {}


def range_key(c: triton.Config) -> str:
    return config_key({**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages})


def m_bucket(m: int) -> int:
    """M rounded up to a power of two, capped: the autotune key, so a new M reuses its bucket's winner."""
    cap = int(load_config_table()["m_bucket_cap"])
    return min(1 << max(int(m) - 1, 0).bit_length(), cap)


def prune_by_block_m(configs, named_args, **kwargs):
    """Keep the configs with the smallest BLOCK_M that covers the M bucket (decode: 16, 32 or 64 rows)."""
    # triton passes positional arguments in named_args and keyword arguments in kwargs
    bucket = int(kwargs["M_BUCKET"] if "M_BUCKET" in kwargs else named_args["M_BUCKET"])
    sizes = sorted({c.kwargs["BLOCK_M"] for c in configs})
    fitting = [s for s in sizes if s >= bucket]
    target = fitting[0] if fitting else sizes[-1]
    return [c for c in configs if c.kwargs["BLOCK_M"] == target]


def prune_by_m_range(configs, named_args, **kwargs):
    """Keep the configs whose [m_min, m_max] holds the M bucket: small tiles for a few hundred rows
    (enough tiles to fill the SMs), large ones above (fewer, longer epilogues)."""
    bucket = int(kwargs["M_BUCKET"] if "M_BUCKET" in kwargs else named_args["M_BUCKET"])
    kept = []
    for c in configs:
        lo, hi = M_RANGES.get(range_key(c), (0, 2**62))
        if lo <= bucket <= hi:
            kept.append(c)
    return kept or list(configs)
