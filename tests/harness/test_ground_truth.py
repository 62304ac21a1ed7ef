"""Where the reference process leaves the ground truth for the judge: /dev/shm first (private, removed at once)."""

import json
import os
import stat
from pathlib import Path

import pytest
import torch
from harness_helpers import EXAMPLES, fast_options

from solkit.harness import runner, truth, worker
from solkit.harness.evaluate import evaluate

SHM = Path("/dev/shm")


@pytest.fixture
def loads(monkeypatch):
    """The files the judge (this process) loads the ground truth from, their modes, their folders' and whether it
    mapped them."""
    seen = []
    real = torch.load

    def spy(path, *a, **kw):
        p = Path(path)
        seen.append((p, stat.S_IMODE(p.stat().st_mode), stat.S_IMODE(p.parent.stat().st_mode), kw.get("mmap")))
        return real(path, *a, **kw)

    monkeypatch.setattr(torch, "load", spy)
    return seen


@pytest.mark.skipif(not (SHM.is_dir() and os.access(SHM, os.W_OK)), reason="no writable /dev/shm")
def test_ground_truth_goes_to_dev_shm_and_is_gone_after_evaluate(loads):
    d = EXAMPLES / "gather_rows"
    traces = evaluate(d, d / "solution_pytorch.json", fast_options(device="cpu", max_workloads=2))
    assert [t.evaluation.status.value for t in traces] == ["PASSED", "PASSED"]
    assert len(loads) == 2
    for path, mode, folder_mode, mapped in loads:
        assert path.parent.parent == SHM and path.parent.name.startswith(f"solkit_judge_{os.getpid()}_")
        assert mapped  # memory already: mapped, not copied
        assert (mode, folder_mode) == (0o600, 0o700)
        assert not path.exists() and not path.parent.exists()
    assert not list(SHM.glob(f"solkit_judge_{os.getpid()}_*"))


def test_a_file_the_first_folder_has_no_room_for_goes_to_the_next(tmp_path, monkeypatch):
    shm, disk = tmp_path / "shm", tmp_path / "disk"
    shm.mkdir()
    disk.mkdir()
    data = {"outputs": [{"y": torch.ones(1000)}]}
    assert truth.save_ground_truth(data, [shm, disk], "a.pt").parent == shm
    monkeypatch.setattr(truth, "SHM_SPARE", 1 << 60)  # no tmpfs has that much room
    path = truth.save_ground_truth(data, [shm, disk], "b.pt")
    assert path == disk / "b.pt" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert torch.equal(torch.load(path)["outputs"][0]["y"], data["outputs"][0]["y"])
    with pytest.raises(OSError):  # never over an existing file
        truth.save_ground_truth(data, [disk], "b.pt")


def test_folders_of_dead_judges_are_swept(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "SHM", tmp_path)
    dead = tmp_path / "solkit_judge_999999999_abc"  # above any pid_max
    alive = tmp_path / f"solkit_judge_{os.getpid()}_abc"
    for d in (dead, alive):
        d.mkdir()
        (d / "w0.pt").write_bytes(b"x")
    dirs = runner.ground_truth_dirs(tmp_path / "base")
    assert not dead.exists() and alive.exists()
    assert dirs[0].parent == tmp_path and dirs[-1] == tmp_path / "base" / "judge"


def test_a_reference_crash_keeps_the_ground_truth_of_the_workloads_before_it(tmp_path):
    # the reference process dies on the second workload; the retry prepares the third: its file must not replace
    # the first workload's (both were the retry's and the first attempt's first file)
    definition = {
        "name": "dies_on_16",
        "axes": {"n": {"type": "var"}},
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
        "outputs": {"y": {"shape": ["n"], "dtype": "float32"}},
        "reference": "import os\n\ndef run(x):\n    if x.shape[0] == 16:\n        os._exit(3)\n    return x * 2\n",
    }
    (tmp_path / "definition.json").write_text(json.dumps(definition))
    (tmp_path / "workload.jsonl").write_text("".join(json.dumps({"uuid": f"n{n}", "axes": {"n": n}}) + "\n"
                                                     for n in (8, 16, 32)))  # fmt: skip
    # a solution wrong on n = 32 only: the first workload judged on the third's ground truth would fail
    code = "def run(x):\n    return x * (3 if x.shape[0] == 32 else 2)\n"
    spec = {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "kernel.py::run",
            "destination_passing_style": False}  # fmt: skip
    solution = {"name": "wrong_on_32", "definition": "dies_on_16", "author": "t", "spec": spec,
                "sources": [{"path": "kernel.py", "content": code}]}  # fmt: skip
    (tmp_path / "solution.json").write_text(json.dumps(solution))
    traces = evaluate(tmp_path, tmp_path / "solution.json", fast_options(device="cpu"))
    got = [t.evaluation.status.value for t in traces]
    assert got == ["PASSED", "INVALID_REFERENCE", "INCORRECT_NUMERICAL"], [t.evaluation.log[-300:] for t in traces]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_host_copies_are_mapped_files_the_record_only_names(tmp_path, dtype):
    folder = tmp_path / "shm"
    folder.mkdir()
    host = truth.HostCopies([folder], "a_w0")
    big = (torch.randn(257, 129) * 5).to(dtype)
    values = {"x": big, "t": big.t(), "zero_dim": torch.tensor(3.5), "empty": torch.empty(0, 4), "n": 7}
    copies = host.copy(values)
    path = truth.save_ground_truth(host.stand_ins({"inputs": [copies]}), [folder], "a_w0.pt")
    assert path.stat().st_size < big.numel() * big.element_size()  # the record names the files, not their bytes
    files = sorted(folder.glob("a_w0_t*.bin"))
    assert len(files) == 3 and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    back = truth.load_ground_truth(path, mmap=False)["inputs"][0]
    for f in files:  # the judge deletes the folder once loaded: its mappings keep the values
        f.unlink()
    for k in ("x", "t", "zero_dim", "empty"):
        assert back[k].dtype == values[k].dtype and torch.equal(back[k], values[k]), k
    assert back["n"] == 7


def test_a_host_copy_the_first_folder_has_no_room_for_goes_to_the_next(tmp_path, monkeypatch):
    shm, disk = tmp_path / "shm", tmp_path / "disk"
    shm.mkdir()
    disk.mkdir()
    monkeypatch.setattr(truth, "SHM_SPARE", 1 << 60)
    host = truth.HostCopies([shm, disk], "b_w1")
    x = torch.randn(100)
    host.copy({"x": x})
    assert not list(shm.iterdir()) and [f.name for f in disk.iterdir()] == ["b_w1_t0.bin"]
    (disk / "b_w1_t1.bin").write_bytes(b"")  # never over an existing file
    with pytest.raises(OSError):
        host.copy({"y": x})


@pytest.mark.parametrize(
    ("per_set", "device", "expected"),
    [(300 << 20, "cuda", 1), (100 << 20, "cuda", 2), (1 << 20, "cuda", 3), (200 << 20, "cpu", 2), (0, "cpu", 3)],
)
def test_the_timing_pool_shrinks_for_large_sets(per_set, device, expected):
    assert worker.pool_size(per_set, device, 3) == expected
