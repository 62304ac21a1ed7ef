"""The seed's guidance tiers (data in ``data/tiers.yaml``): what to do at a given SOL fraction."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml


@dataclass(frozen=True)
class Tier:
    name: str
    label: str
    lower: float
    upper: float
    advice: str


@functools.lru_cache(maxsize=1)
def _tiers() -> list[dict]:
    return yaml.safe_load(resources.files("solkit.sol").joinpath("data/tiers.yaml").read_text())["tiers"]


def tier_for(fraction: float, bound: str = "memory") -> Tier:
    """The tier a SOL fraction (or MFU / bandwidth utilisation) falls in, with advice for its bound."""
    f = min(max(fraction, 0.0), 1.0)
    for t in _tiers():
        lo, hi = t["range"]
        if lo <= f < hi:
            advice = t["advice"].get(bound) or t["advice"].get("any") or ""
            return Tier(t["name"], t["label"], lo, hi, advice)
    raise AssertionError(f"tiers.yaml does not cover {f}")  # the data file must cover [0, 1]
