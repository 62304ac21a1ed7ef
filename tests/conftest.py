"""Shared pytest setup.

On a machine without a CUDA GPU, Triton kernels run through Triton's interpreter
(``TRITON_INTERPRET=1``); it must be set before triton is first imported, so it is set here.
Tests that need a real GPU carry ``@pytest.mark.gpu`` and are skipped on such machines.
"""

from __future__ import annotations

import os
import sys
import tempfile

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA and "triton" not in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Calibrations measured by tests go to a scratch cache, never the user's.
os.environ.setdefault("SOLKIT_CACHE_DIR", tempfile.mkdtemp(prefix="solkit-test-cache-"))


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture
def device() -> str:
    return "cuda" if HAS_CUDA else "cpu"
