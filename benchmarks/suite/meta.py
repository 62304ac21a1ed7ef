"""The run's record: when, where (device, driver), with what (versions, git commit), and its output path."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "benchmarks"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + (" (tree modified)" if dirty else "")


def device_record(device: torch.device) -> dict:
    from solkit.hardware.detect import detect_device

    info = detect_device(device)
    return {
        "name": info.name,
        "kind": info.kind,
        "arch": info.arch_id,
        "driver": info.driver,
        "cuda": info.cuda_version,
        "sm_count": info.sm_count,
        "compute_capability": info.compute_capability,
    }


def device_slug(dev: dict) -> str:
    """``h200``, ``a100``, ... from the arch record or the name; ``cpu`` on the interpreter."""
    if dev["kind"] != "cuda":
        return "cpu"
    m = re.search(r"([A-Z]+\d+[A-Z]?)", dev.get("name") or "")
    return (m.group(1) if m else (dev.get("arch") or "gpu").split("-")[0]).lower()


def versions() -> dict:
    import triton

    out = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "liger_kernel": _version("liger-kernel"),
        "solkit": _version("solkit"),
    }
    return out


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def out_path(topic: str, slug: str, when: dt.datetime, small: bool, out: str | None) -> Path:
    """``benchmarks/results/<topic>/<date>_<device>[_small].json``; ``--out`` a file or a folder. A name that is
    taken gets the time of day."""
    if out and out.endswith(".json"):
        return Path(out)
    folder = Path(out) if out else RESULTS / topic
    stem = f"{when:%Y-%m-%d}_{slug}" + ("_small" if small else "")
    path = folder / f"{stem}.json"
    return path if not path.exists() else folder / f"{stem}_{when:%H%M}.json"
