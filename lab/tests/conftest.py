"""The lab's tests share the product tests' setup (interpreter on CPU-only machines, ``gpu`` marker skips, the
``device`` fixture): one home, ``tests/conftest.py``."""

from tests.conftest import HAS_CUDA, device, pytest_collection_modifyitems  # noqa: F401
