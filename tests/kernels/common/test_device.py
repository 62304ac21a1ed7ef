"""solkit.kernels.common.device: the one home of the interpreter check, the SM count and the descriptor scratch."""

from __future__ import annotations

import pytest
import torch

from solkit.kernels.common import device


@pytest.mark.parametrize(("value", "expect"), [("1", True), ("0", False), ("", False), (None, False)])
def test_interpreting_reads_the_environment(monkeypatch, value, expect):
    if value is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", value)
    assert device.interpreting() is expect


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sm_count_on_the_cpu(dtype):
    assert device.sm_count(torch.empty(3, 5, dtype=dtype)) == 4


@pytest.mark.parametrize("size", [128, 640, 1000])
def test_descriptor_scratch_is_int8_of_the_size(size):
    buf = device.descriptor_scratch(size, 128, None)
    assert buf.dtype == torch.int8 and buf.numel() == size


def test_gluon_unavailable_reason_names_the_import_error():
    assert "gluon" in device.gluon_unavailable_reason("ImportError: x")


@pytest.mark.gpu
def test_cuda_sm_count_agrees_with_torch():
    props = torch.cuda.get_device_properties(0)
    assert device.cuda_sm_count(0) == device.cuda_sm_count(torch.device("cuda", 0)) == props.multi_processor_count
    assert device.sm_count(torch.empty(1, device="cuda")) == props.multi_processor_count
