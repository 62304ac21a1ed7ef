"""``solkit tune ... --workloads LIST [--devices ... | --ray ...]``: one tuning run per workload, spread over devices.

Each workload's search is one item; the workers of one host share the tuning cache (its writers lock each
entry, :class:`~solkit.tune.cache.TuneCache`), so two cards of one product tuning the same shape bucket add to
one entry and each later run reads both. A Ray node tunes into its own cache (no shared filesystem).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from solkit.errors import SolkitError
from solkit.scale import Call, Item, device_identity, pack, unpacked, worker_state


def workload_indices(text: str, count: int) -> list[int]:
    """``all`` or ``0,2,5`` -> indices of the problem's ``count`` workloads (bad input is one line)."""
    if text.strip().lower() == "all":
        return list(range(count))
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        if not part.isdigit() or int(part) >= count:
            raise SolkitError(f"--workloads {text!r}: {part!r} is not a workload index 0..{count - 1} (or give all)")
        out.append(int(part))
    if not out:
        raise SolkitError("--workloads: empty; give all or indices such as 0,2")
    return out


def tune_workload(problem_src, solution_src, solution_name: str, index: int, options: dict[str, Any]) -> dict:
    """Tune workload ``index`` on this process's device; the result says which device it was."""
    from solkit.tune.solution import tune_solution

    state = worker_state()
    ident = state.identity if state else device_identity(options.pop("device", "cpu"))
    out = tune_solution(unpacked(problem_src), unpacked(solution_src) / solution_name, workload_index=index, **options)
    out.update(workload_index=index, device_uuid=ident["uuid"], device_name=ident["name"])
    return out


def tune_workloads(pool, problem_dir: str, solution: str, indices: list[int], options: dict[str, Any]) -> list[dict]:
    """Every workload in ``indices`` tuned (serially when ``pool`` is None); results in the order of ``indices``."""
    sol = Path(solution)
    if not sol.is_file():
        raise SolkitError(f"--solution {sol}: no such file (give a solution.json or a .py file)")
    if pool is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
        return [tune_workload(problem_dir, str(sol.parent), sol.name, i, {**options, "device": device})
                for i in indices]  # fmt: skip
    remote = pool.kind == "ray"
    psrc = pack(problem_dir) if remote else problem_dir
    ssrc = pack(sol.parent, "*") if remote else str(sol.parent)
    items = [Item((str(i),), Call(tune_workload, (psrc, ssrc, sol.name, i, options))) for i in indices]
    results: list[dict | None] = [None] * len(items)
    with pool:
        for out in pool.map_unordered(items):
            results[out.index] = out.value if out.ok else {
                "workload_index": indices[out.index], "best": None, "evaluations": [], "error": out.error,
                "device_uuid": out.device.get("uuid"), "device_name": out.device.get("name")}  # fmt: skip
    return results
