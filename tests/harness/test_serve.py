"""The candidate process's command loop (solkit.harness.serve), driven directly on a CPU."""

import io
import json

import pytest
import torch

from solkit.harness import buffers, serve


def _server(tmp_path):
    spec = {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "kernel.py::run",
            "destination_passing_style": False}  # fmt: skip
    solution = {"name": "double", "definition": "d", "author": "t", "spec": spec,
                "sources": [{"path": "kernel.py", "content": "def run(x):\n    return x * 2\n"}]}  # fmt: skip
    server = serve.Server({"device": "cpu", "scratch": str(tmp_path), "solution": solution}, io.StringIO())
    calls = []

    def fn(x):
        calls.append(x)
        return x * 2

    server.fn = fn
    return server, calls


@pytest.mark.parametrize("shape", [(7,), (33, 5)])
def test_a_reused_batch_calls_on_the_pool_the_previous_batch_staged(tmp_path, shape, monkeypatch):
    server, calls = _server(tmp_path)
    x, x_spec = buffers.create(tmp_path / "in0", torch.float32, shape)
    y, y_spec = buffers.create(tmp_path / "out0", torch.float32, shape)
    x.write(torch.randn(shape))
    staged = []
    real = server._stage
    monkeypatch.setattr(server, "_stage", lambda cmd: staged.append(1) or real(cmd))
    cmd = {"dps": False, "names": ["y"], "pool": [{"args": [x_spec], "outs": [y_spec]}]}
    assert server.batch(dict(cmd))["ok"] and len(staged) == 1
    assert server.batch({**cmd, "repeat": 4, "reuse": True})["ok"]
    assert len(staged) == 1 and len(calls) == 5  # no staging again, and every call made
    assert torch.equal(y.read(), x.read() * 2)
    other = {**cmd, "pool": [{"args": [x_spec], "outs": [y_spec], "extra": 1}]}
    server.batch({**other, "reuse": True})  # another pool: staged afresh
    assert len(staged) == 2
    server.batch({**cmd, "stage_only": True})
    server.batch({**cmd, "reuse": True})  # a staging-only batch leaves nothing to reuse
    assert len(staged) == 4
    json.dumps(server.ping({}))
