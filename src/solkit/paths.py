"""The one cache root of solkit: every persistent cache (calibration, tuning) lives under it.

``$SOLKIT_CACHE_DIR`` when set, else the user cache directory of the platform (``platformdirs``:
``~/.cache/solkit`` on Linux). Each concern takes a subdirectory: ``calibration/``, ``tune/``. A concern may keep
its own override for its subdirectory (``$SOLKIT_TUNE_CACHE``, ``--cache-dir``), but never a second root.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$SOLKIT_CACHE_DIR``, else the platform's user cache directory for solkit."""
    env = os.environ.get("SOLKIT_CACHE_DIR")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir  # imported here: `solkit --version` never needs it

    return Path(user_cache_dir("solkit"))


def cache_dir(concern: str) -> Path:
    """The subdirectory of :func:`cache_root` that one concern (``calibration``, ``tune``) owns."""
    return cache_root() / concern
