"""Input generation for one workload: deterministic, on the target device, fresh per trial.

Each (seed, workload uuid, trial) triple seeds its own generator, so trial *k* of a workload gets
the same tensors in every process (the reference and the candidate see identical values) while
different trials get different values. Inputs come from the workload's spec:

* ``random``: dtype-aware draws (below), with name heuristics so the values are realistic;
* ``scalar``: the given value;
* ``safetensors``: loaded from the file (resolved beside the problem, then ``$FLASHINFER_TRACE_DIR``),
  shape and dtype checked; the same tensor every trial;
* ``custom``: the definition's ``custom_inputs_entrypoint(axes_and_scalars, device)``, called every
  trial after seeding torch, numpy and ``random``.

Random draws: float ``randn``; fp8 ``randn`` clamped to ±2; fp4 random packed bytes; bool {0, 1};
int8 full range; wider ints [-1024, 1024). Float name heuristics (first match wins):

==========================================  =====================================================
name                                        values
==========================================  =====================================================
``*norm_weight``, ``norm*weight`` (1-D)     1 + 0.1·randn (not exactly 1: a kernel ignoring the
                                            weight must fail; SOL-ExecBench uses ones)
``*norm_bias``                              0.1·randn (SOL-ExecBench: zeros)
``attention_mask``, ``causal_mask`` (≥2-D)  causal additive mask: 0 on/below the diagonal, finfo.min above
``*_mask`` (other)                          {0, 1}
``cos``/``sin``/``rope_*``/``*_cached``     cos or sin of clamped randn
``rstd``, ``std``, ``var*``, ``*_rstd``...  \\|randn\\| + 0.1
``A``, ``A_log``, ``g``, ``dt``...          fixed ranges of SSM decays (``A`` < 0)
``*probs``, ``*attn_weights``, sampling     softmax(randn) over the last dim
≥2-D ``*weight``/``*_proj``/``w_*``         randn / sqrt(fan_in)
==========================================  =====================================================
"""

from __future__ import annotations

import hashlib
import math
import os
import random
from pathlib import Path
from typing import Any

import torch

from solkit.errors import SolkitError
from solkit.problems.loader import Problem
from solkit.problems.schema import SafetensorsInput, ScalarInput, Workload

FLOAT_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
FP8_DTYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
FP4_DTYPES = tuple(getattr(torch, n) for n in ("float4_e2m1fn_x2",) if hasattr(torch, n))


def trial_seed(seed: int, uuid: str, trial: int) -> int:
    """A 63-bit seed for one trial of one workload."""
    digest = hashlib.sha256(f"{seed}|{uuid}|{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _is_norm_weight(name: str, ndim: int) -> bool:
    n = name.lower()
    return ndim == 1 and (n.endswith("norm_weight") or ("norm" in n and n.endswith("weight")) or n in ("gamma", "ln_w"))


def _is_weight_matrix(name: str, ndim: int) -> bool:
    n = name.lower()
    return ndim >= 2 and (
        n.endswith(("weight", "weights", "_proj", "_w")) or n.startswith("w_") or n in ("w", "w1", "w2", "w3")
    )


def _random_float(name: str, shape: tuple[int, ...], dtype: torch.dtype, gen, dev, sampling: bool) -> torch.Tensor:
    n = name.lower()
    ndim = len(shape)

    def randn() -> torch.Tensor:
        return torch.randn(shape, generator=gen, device=dev, dtype=torch.float32)

    def uniform(lo: float, hi: float) -> torch.Tensor:
        return torch.rand(shape, generator=gen, device=dev, dtype=torch.float32) * (hi - lo) + lo

    if _is_norm_weight(name, ndim):
        x = 1.0 + 0.1 * randn()
    elif n.endswith("norm_bias"):
        x = 0.1 * randn()
    elif n in ("attention_mask", "causal_mask") and ndim >= 2:
        rows, cols = shape[-2], shape[-1]
        above = torch.ones(rows, cols, device=dev, dtype=torch.bool).triu(1 + max(cols - rows, 0))
        x = torch.zeros(shape, device=dev, dtype=torch.float32).masked_fill(above, torch.finfo(dtype).min)
        return x.to(dtype)
    elif n.endswith("_mask") or n == "mask":
        x = torch.randint(0, 2, shape, generator=gen, device=dev).float()
    elif n in ("cos", "sin") or n.startswith("rope_") or n.endswith("_cached") or n.endswith(("_cos", "_sin")):
        t = randn().clamp(-3, 3)
        x = torch.sin(t) if "sin" in n else torch.cos(t)
    elif n in ("rstd", "std", "variance") or n.startswith("var") or n.endswith(("_rstd", "_std", "_var", "_variance")):
        x = randn().abs() + 0.1
    elif n == "a":
        x = -uniform(1.0, 16.0)
    elif n == "a_log":
        x = uniform(0.0, math.log(16.0))
    elif n in ("g", "decay", "gate_decay"):
        x = -uniform(0.01, 1.0)
    elif n in ("dt", "delta"):
        x = uniform(1e-3, 0.1)
    elif n.endswith(("probs", "attn_weights", "attention_weights", "routing_weights")) or (sampling and ndim):
        x = torch.softmax(randn(), dim=-1) if ndim else randn()
    elif _is_weight_matrix(name, ndim):
        x = randn() / math.sqrt(max(shape[-1], 1))
    else:
        x = randn()
    return x.to(dtype)


def random_tensor(name: str, shape: tuple[int, ...], dtype: torch.dtype, gen, dev, sampling: bool = False):
    """One random input tensor (see the module docstring for the distributions)."""
    if dtype in FLOAT_DTYPES:
        return _random_float(name, shape, dtype, gen, dev, sampling)
    if dtype in FP8_DTYPES:
        return torch.randn(shape, generator=gen, device=dev).clamp(-2, 2).to(dtype)
    if dtype in FP4_DTYPES:
        return torch.randint(0, 256, shape, generator=gen, device=dev, dtype=torch.uint8).view(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen, device=dev).bool()
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, generator=gen, device=dev, dtype=torch.int8)
    return torch.randint(-1024, 1024, shape, generator=gen, device=dev, dtype=dtype)


def random_scalar(dtype: torch.dtype, gen) -> bool | int | float:
    if dtype == torch.bool:
        return bool(torch.randint(0, 2, (1,), generator=gen).item())
    if dtype.is_floating_point:
        return float(torch.randn(1, generator=gen).item())
    return int(torch.randint(1, 1024, (1,), generator=gen).item())


def _resolve_safetensors(problem: Problem, rel: str) -> Path:
    roots = [p for p in (problem.root, os.environ.get("FLASHINFER_TRACE_DIR")) if p]
    parts = Path(rel).parts
    for root in roots:
        for k in range(len(parts)):  # strip leading components until a file matches
            cand = Path(root, *parts[k:])
            if cand.is_file():
                return cand
    if Path(rel).is_file():
        return Path(rel)
    raise SolkitError(f"safetensors file {rel!r} not found beside {problem.root} or in $FLASHINFER_TRACE_DIR")


class InputFactory:
    """Builds inputs and output buffers of a problem's workloads on one device."""

    def __init__(self, problem: Problem, device: torch.device | str, seed: int = 200) -> None:
        self.problem = problem
        self.device = torch.device(device)
        self.seed = int(seed)
        self._safetensors: dict[tuple[str, str], torch.Tensor] = {}

    def _generator(self, workload: Workload, trial: int) -> torch.Generator:
        gen = torch.Generator(device=self.device)
        gen.manual_seed(trial_seed(self.seed, workload.uuid, trial))
        return gen

    def generate(self, workload: Workload, trial: int) -> dict[str, Any]:
        """Inputs for one trial, in the definition's input order."""
        p = self.problem
        shapes = p.input_shapes(workload)
        dtypes = p.input_dtypes()
        if workload.is_custom:
            return self._custom(workload, trial, shapes, dtypes)
        gen = self._generator(workload, trial)
        cpu_gen = torch.Generator().manual_seed(trial_seed(self.seed, workload.uuid, trial))
        sampling = (p.definition.op_type or "") == "sampling"
        out: dict[str, Any] = {}
        for name, _spec in p.definition.inputs.items():
            src = workload.inputs.get(name)
            shape, dtype = shapes[name], dtypes[name]
            if isinstance(src, ScalarInput):
                out[name] = src.value
            elif isinstance(src, SafetensorsInput):
                out[name] = self._load_safetensors(src, name, shape, dtype)
            elif shape is None:
                out[name] = random_scalar(dtype, cpu_gen)
            else:
                out[name] = random_tensor(name, shape, dtype, gen, self.device, sampling and name.endswith("probs"))
        return out

    def _custom(self, workload: Workload, trial: int, shapes, dtypes) -> dict[str, Any]:
        fn = self.problem.custom_inputs_fn()
        s = trial_seed(self.seed, workload.uuid, trial)
        torch.manual_seed(s)
        random.seed(s)
        try:
            import numpy as np

            np.random.seed(s % (2**32))
        except ImportError:  # pragma: no cover - numpy is a dependency
            pass
        axes_and_scalars = {**self.problem.resolve_axes(workload), **self.problem.scalar_values(workload)}
        produced = fn(axes_and_scalars, self.device)
        if not isinstance(produced, dict):
            raise TypeError(f"custom_inputs_entrypoint returned {type(produced).__name__}, expected a dict")
        missing = [n for n in self.problem.definition.inputs if n not in produced]
        if missing:
            raise TypeError(f"custom_inputs_entrypoint did not produce inputs {missing}")
        out = {n: produced[n] for n in self.problem.definition.inputs}
        for n, v in out.items():
            if isinstance(v, torch.Tensor) and shapes[n] is not None and tuple(v.shape) != shapes[n]:
                raise TypeError(f"custom input {n!r} has shape {tuple(v.shape)}, definition says {shapes[n]}")
        return out

    def _load_safetensors(self, src: SafetensorsInput, name: str, shape, dtype) -> torch.Tensor:
        key = (src.path, src.tensor_key)
        if key not in self._safetensors:
            from safetensors.torch import load_file

            path = _resolve_safetensors(self.problem, src.path)
            tensors = load_file(str(path))
            if src.tensor_key not in tensors:
                raise SolkitError(f"{path}: no tensor {src.tensor_key!r}; keys: {sorted(tensors)[:10]}")
            t = tensors[src.tensor_key]
            if shape is not None and tuple(t.shape) != tuple(shape):
                raise SolkitError(f"{path}:{src.tensor_key}: shape {tuple(t.shape)} != {shape} for input {name!r}")
            if t.dtype != dtype:
                raise SolkitError(f"{path}:{src.tensor_key}: dtype {t.dtype} != {dtype} for input {name!r}")
            self._safetensors[key] = t
        return self._safetensors[key].to(self.device).clone()

    def allocate_outputs(self, workload: Workload) -> dict[str, torch.Tensor]:
        """Destination buffers for a DPS call, poisoned (NaN / sentinel) so unwritten elements fail."""
        shapes = self.problem.output_shapes(workload)
        out = {}
        for name, dtype in self.problem.output_dtypes().items():
            t = torch.empty(shapes[name] or (), dtype=dtype, device=self.device)
            out[name] = poison_(t)
        return out


def poison_(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` with a value no correct kernel leaves behind: NaN for floats, a sentinel otherwise."""
    if t.dtype in FP4_DTYPES:
        t.view(torch.uint8).fill_(0xA5)
    elif t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(-91 if t.element_size() == 1 else -12345)
    return t


def to_device(values: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """Fresh device copies of a dict of tensors/scalars (scalars pass through)."""
    return {k: v.to(device, copy=True) if isinstance(v, torch.Tensor) else v for k, v in values.items()}
