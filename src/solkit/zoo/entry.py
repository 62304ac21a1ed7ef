"""``module:function`` entry points: a user's function returning (model, inputs) or a Built."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import torch

from solkit.errors import SolkitError
from solkit.zoo.built import Built


def _import(module: str, spec: str):
    if module.endswith(".py"):
        path = Path(module)
        if not path.is_file():
            raise SolkitError(f"--entry {spec!r}: no file {module}")
        name = f"solkit_entry_{path.stem}"
        loader = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(loader)
        sys.modules[name] = mod
        try:
            loader.loader.exec_module(mod)
        except Exception as e:  # a user's file: any failure is one line
            sys.modules.pop(name, None)
            raise SolkitError(f"--entry {spec!r}: importing {module} failed: {type(e).__name__}: {e}") from None
        return mod
    try:
        return importlib.import_module(module)
    except Exception as e:  # ImportError, or anything the user's module raises while importing
        raise SolkitError(f"--entry {spec!r}: cannot import module {module!r}: {type(e).__name__}: {e}") from None


def _as_args(inputs, spec: str) -> tuple[tuple, dict]:
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    raise SolkitError(f"--entry {spec!r}: inputs must be a tensor, a tuple/list or a dict, got {type(inputs).__name__}")


def load_entry(spec: str) -> Built:
    """Call ``pkg.mod:function`` (or ``path/file.py:function``) and wrap what it returns as a :class:`Built`.

    The function takes no arguments and returns ``(model, inputs)`` (inputs: a tensor, a tuple of
    positional arguments or a dict of keyword arguments) or a ready :class:`Built`.
    """
    module, sep, func = spec.rpartition(":")
    if not sep or not module or not func:
        raise SolkitError(f"--entry {spec!r}: expected module:function (e.g. mypkg.models:make)")
    mod = _import(module, spec)
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise SolkitError(f"--entry {spec!r}: module {module!r} has no function {func!r}")
    try:
        out = fn()
    except Exception as e:  # the user's builder failed: one line naming it
        raise SolkitError(f"--entry {spec!r}: {func}() raised {type(e).__name__}: {e}") from None
    if isinstance(out, Built):
        return out
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[0], torch.nn.Module)):
        raise SolkitError(f"--entry {spec!r}: {func}() must return (model, inputs) or a solkit.zoo.Built")
    model, inputs = out
    args, kwargs = _as_args(inputs, spec)
    return Built(model, args, kwargs, None, "entry", None, None, f"{spec} ({type(model).__name__})")
