"""A backend that writes into its inputs while being timed must not change the next backend's verdict."""

import pytest

import solkit.backends as B
from solkit.bench import runner as R
from solkit.sol.model import Ceilings

CEIL = {"calibrated": Ceilings("cpu-test", "calibrated", {"fp32_vector": 1e11, "bf16_tensor": 1e11}, 1e10)}


@pytest.fixture
def evil_backend(monkeypatch):
    def make(ref):
        def run(x, w):
            out = ref(x, w)
            x.mul_(3.0)  # corrupts its input after computing a correct output
            return out

        return run

    backends = dict(B.BACKENDS)
    backends["evil"] = B.Backend("evil", "writes into its inputs", {"rmsnorm": make})
    monkeypatch.setattr(R, "BACKENDS", backends)


def test_mutating_backend_is_noted_and_the_next_backend_still_passes(evil_backend):
    cfg = R.BenchConfig(device="cpu", sizes=("s",), ops=("rmsnorm",), backends=("evil", "eager", "vendor"),
                        reps=2, trials=1, models=("llama3-8b",))  # fmt: skip
    rows = R.run_suite(cfg, CEIL)
    by = {r.backend: r for r in rows}
    assert by["evil"].status == "ok" and "wrote into its input buffers" in by["evil"].error
    assert by["eager"].status == "ok" and by["vendor"].status == "ok"
    assert by["eager"].error is None
