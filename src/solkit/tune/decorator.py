"""A drop-in replacement for ``@triton.autotune`` backed by solkit's search, engine and cache.

    @solkit.tune.autotune(configs=[triton.Config({...}, num_warps=4), ...], key=["M", "N"])   # list mode
    @solkit.tune.autotune(key=["M"], space={"params": {...}}, budget=30)                       # search mode
    @triton.jit
    def kernel(...): ...

    kernel[grid](*args)          # first call per key: tune (or read the cache), then launch

Differences from ``triton.autotune``, all deliberate:

* ``key`` values are bucketed (exact up to 64, then the next power of two; ``bucket="exact"`` to
  match Triton), so a new sequence length does not re-tune;
* every config passes a correctness gate: its outputs (the arguments named in ``outputs``, else the
  tensor arguments the first working config changed) are compared with ``reference(*args, **kwargs)``
  if given, else with that first config's, and a config that disagrees is never chosen;
* compilation of the candidates runs in parallel worker processes (when the kernel lives in an
  importable module, not ``__main__``), benchmarking serially with the harness protocol;
* every measurement goes to the persistent cache (``cache_results=True`` by default); a later
  process reads the winner back, and adding a config to the list measures only that config;
* CUDA-graph safe: a key first met while the stream is capturing is never tuned (timing cannot run
  inside a capture): it takes the persisted winner, else the first candidate for that launch only
  (with a warning), and the next call outside capture tunes. Once a key is known, a launch does no
  host synchronisation and no file access.

As in ``triton.autotune``, a key whose pruned candidate list holds one config launches it untimed.

``warmup``, ``rep``, ``use_cuda_graph`` and ``do_bench`` are accepted for signature parity and
ignored: the harness protocol decides (L2 flush, CUDA graphs under ~100 µs, median of many reps).
``prune_configs_by`` is honoured (``early_config_prune`` and ``perf_model``/``top_k``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from solkit.errors import SolkitError
from solkit.tune.cache import TuneCache, environment, make_key, shape_bucket, source_hash
from solkit.tune.compile_pool import CompilePool, interpreter_mode
from solkit.tune.records import BenchSettings, CompileJob, TuneProblem
from solkit.tune.space import Config, Space, smem_limit
from solkit.tune.strategies import DEFAULT_STRATEGY
from solkit.tune.tuner import TuneResult, tune


def _config_to_dict(cfg: Any) -> Config:
    if isinstance(cfg, Mapping):
        return dict(cfg)
    out = dict(getattr(cfg, "kwargs", {}))
    out["num_warps"] = getattr(cfg, "num_warps", 4)
    out["num_stages"] = getattr(cfg, "num_stages", 3)
    if getattr(cfg, "num_ctas", 1) not in (None, 1):
        out["num_ctas"] = cfg.num_ctas
    if getattr(cfg, "maxnreg", None) is not None:
        out["maxnreg"] = cfg.maxnreg
    return out


def _uniform(configs: Sequence[Config]) -> list[Config]:
    """Give every config every key (None where it had none), as a Space needs; :func:`_split` drops
    the Nones again, so a config launches with exactly its own keys (``triton.autotune`` lists may
    differ in their keys: the kernel's defaults or heuristics fill the rest)."""
    names = list(dict.fromkeys(k for c in configs for k in c))
    return [{k: c.get(k) for k in names} for c in configs]


def _split(space: Space, config: Config) -> tuple[dict[str, Any], dict[str, Any]]:
    meta, launch = space.split(config)
    return {k: v for k, v in meta.items() if v is not None}, {k: v for k, v in launch.items() if v is not None}


class Autotuner:
    """The object ``@autotune`` returns: index it with a grid and call it, like a JIT function."""

    def __init__(
        self,
        fn: Any,
        configs: Sequence[Any] | None,
        key: Sequence[str],
        *,
        space: Space | Mapping[str, Any] | None,
        budget: int | None,
        strategy: str | None,
        prune_configs_by: Mapping[str, Any] | None,
        reset_to_zero: Sequence[str] | None,
        restore_value: Sequence[str] | None,
        pre_hook: Callable | None,
        post_hook: Callable | None,
        cache_results: bool,
        cache: TuneCache | None,
        reference: Callable | None,
        bucket: str,
        seed: int,
        settings: BenchSettings | None,
        outputs: Sequence[str] | None = None,
    ) -> None:
        self.fn = fn
        self.arg_names = list(getattr(fn, "arg_names", []))
        self.key = list(key)
        named_lists = self.key + list(reset_to_zero or ()) + list(restore_value or ()) + list(outputs or ())
        unknown = [k for k in named_lists if k not in self.arg_names]
        if self.arg_names and unknown:
            raise SolkitError(f"autotune: {unknown} are not arguments of {getattr(fn, '__name__', fn)}; "
                              f"allowed: {self.arg_names}")  # fmt: skip
        if space is not None:
            self.space = space if isinstance(space, Space) else Space.from_dict(space, smem_limit_bytes=smem_limit())
        elif configs:
            self._config_list = _uniform([_config_to_dict(c) for c in configs])
            self.space = Space.from_configs(self._config_list)
        else:
            raise SolkitError("autotune needs configs=[...] or space={...}")
        self.list_mode = space is None
        self.budget = budget
        self.strategy = strategy or ("exhaustive" if self.list_mode else DEFAULT_STRATEGY)
        self.prune = dict(prune_configs_by or {})
        self.reset_to_zero = list(reset_to_zero or ())
        self.restore_value = list(restore_value or ())
        self.pre_hook, self.post_hook = pre_hook, post_hook
        self.cache = (cache or TuneCache()) if cache_results else None
        self.reference = reference
        self.outputs = list(outputs or ())
        self.bucket = bucket
        self.seed = seed
        self.settings = settings
        self.best: dict[tuple, Config] = {}
        self.results: dict[tuple, TuneResult] = {}
        self._pool: CompilePool | None = None
        self._split_of: dict[tuple, tuple[dict[str, Any], dict[str, Any]]] = {}  # key -> (meta, launch) of its best
        self._last: tuple[dict[str, Any], dict[str, Any]] | None = None  # (meta, launch) of the last launch
        self._triton_configs: dict[int, tuple[Any, Any]] = {}

    # ------------------------------------------------------------------ triton.autotune parity
    @property
    def configs(self) -> list[Any]:
        """The list as ``triton.Config`` objects, in the given order (list mode) or the space's order."""
        import triton

        dicts = getattr(self, "_config_list", None) or self.space.configs
        return [_as_triton(triton, self.space, c) for c in dicts]

    @property
    def best_config(self) -> Any:
        """The ``triton.Config`` of the last launch (``None`` before the first one), as triton's Autotuner."""
        if self._last is None:
            return None
        held = self._triton_configs.get(id(self._last))
        if held is None or held[0] is not self._last:
            import triton

            held = (self._last, triton.Config(dict(self._last[0]), **self._last[1]))
            self._triton_configs[id(self._last)] = held
        return held[1]

    # ------------------------------------------------------------------ launching
    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def _named(self, args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        named = dict(zip(self.arg_names, args))
        named.update(kwargs)
        return named

    def tuning_key(self, named: Mapping[str, Any]) -> tuple:
        shape = tuple((k, shape_bucket(named.get(k), self.bucket)) for k in self.key)
        dtypes = tuple(str(v.dtype) for v in named.values() if isinstance(v, torch.Tensor))
        return shape + dtypes

    def _launch(self, config: Config, args: tuple, kwargs: Mapping[str, Any], grid: Any) -> Any:
        meta, launch = _split(self.space, config)
        return self.fn[grid](*args, **kwargs, **meta, **launch)

    def run(self, *args: Any, grid: Any, **kwargs: Any) -> Any:
        named = self._named(args, kwargs)
        tkey = self.tuning_key(named)
        split = self._split_of.get(tkey)
        if split is None:  # first call of this key: choose (tune, or read the cache), then launch
            config, remember = self._choose(args, kwargs, grid, named, tkey)
            split = _split(self.space, config)
            if remember:  # (a capture's stand-in is launched once and not kept)
                self.best[tkey] = config
                self._split_of[tkey] = split
        self._last = split
        return self.fn[grid](*args, **kwargs, **split[0], **split[1])

    def _choose(self, args, kwargs, grid, named, tkey) -> tuple[Config, bool]:
        """(config, whether to remember it for the key)."""
        space = self._candidates(named)
        if len(space) == 1:
            return space.configs[0], True
        if _capturing():
            cached = self.cache.winner(self._cache_key(named), space.configs) if self.cache is not None else None
            if cached is not None:
                return cached, True
            warnings.warn(f"autotune: {getattr(self.fn, '__name__', 'kernel')} key {tkey} first met inside a CUDA "
                          "graph capture with no cached winner: launching its first candidate untimed; call it "
                          "once outside capture to tune", stacklevel=4)  # fmt: skip
            return space.configs[0], False
        result = self._tune(args, kwargs, grid, named, space)
        if result.best is None:
            raise SolkitError(f"autotune: no config of {getattr(self.fn, '__name__', 'kernel')} ran correctly "
                              f"for key {tkey}; statuses {result.statuses}")  # fmt: skip
        self.results[tkey] = result
        return result.best, True

    # ------------------------------------------------------------------ tuning
    def _candidates(self, named: Mapping[str, Any]) -> Space:
        space = self.space
        prune = self.prune.get("early_config_prune")
        perf_model = self.prune.get("perf_model")
        if not prune and not perf_model:
            return space
        configs = space.configs
        if prune:
            import triton

            as_cfg = [_as_triton(triton, space, c) for c in configs]
            kept = prune(as_cfg, dict(named))
            configs = [{k: c.get(k) for k in space.names} for c in map(_config_to_dict, kept)]  # the list's keys
        if perf_model:
            est = sorted(configs, key=lambda c: perf_model(**dict(named), **c))
            top = self.prune.get("top_k", 1.0)
            n = int(len(est) * top) if isinstance(top, float) and top <= 1.0 else int(top)
            configs = est[: max(1, n)]
        return Space.from_configs(configs) if configs else space

    def _problem(
        self, args: tuple, kwargs: Mapping[str, Any], grid: Any, named: Mapping[str, Any], space: Space
    ) -> TuneProblem:
        tensor_idx = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        fixed = [i for i, n in enumerate(self.arg_names[: len(args)]) if n in self.outputs]
        if len(fixed) != len(self.outputs):
            raise SolkitError(f"autotune: outputs {self.outputs} must be passed positionally to "
                              f"{getattr(self.fn, '__name__', 'kernel')}")  # fmt: skip
        originals = {n: named[n].clone() for n in self.restore_value}

        def clone_args(_seed: int) -> tuple:
            return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)

        def run(config: Config, inputs: tuple) -> tuple:
            nm = self._named(inputs, kwargs)
            for name in self.reset_to_zero:
                nm[name].zero_()
            if self.pre_hook:
                self.pre_hook(nm)
            self._launch(config, inputs, kwargs, grid)
            if self.post_hook:
                self.post_hook(nm, None)
            return tuple(inputs[i] for i in outputs)

        # outputs: the named ones, else the tensors the first working config changes (found while
        # building the reference)
        outputs: list[int] = fixed or list(tensor_idx)

        def reference(inputs: tuple) -> tuple:
            if self.reference is not None:
                got = self.reference(*inputs, **kwargs)
                outs = got if isinstance(got, tuple) else (got,)
                if not fixed:
                    first = self._run_first_working(space, inputs, run, clone_args)
                    outputs[:] = _changed(args, first) or tensor_idx
                return outs
            before = clone_args(0)
            after = self._run_first_working(space, inputs, run, clone_args)
            if not fixed:
                outputs[:] = _changed(before, after) or tensor_idx
            return tuple(after[i].clone() for i in outputs)

        def bench_inputs(_seed: int) -> tuple:
            return args  # the caller's own tensors, as triton.autotune does (restored afterwards)

        problem = TuneProblem(
            name=getattr(self.fn, "__name__", "kernel"),
            make_inputs=lambda seed: clone_args(seed) if seed == 7 else bench_inputs(seed),
            run=run,
            reference=reference,
            output_index=outputs,
            fresh_check_inputs=True,
            compile_job=self._compile_job_factory(args, kwargs),
            rel_tol=1e-2 if any(getattr(a, "dtype", None) in (torch.float16, torch.bfloat16) for a in args) else 1e-4,
        )
        problem.meta["restore"] = originals
        return problem

    def _run_first_working(self, space: Space, inputs, run, clone_args) -> tuple:
        last: Exception | None = None
        for cfg in space.configs:
            trial = clone_args(0)
            try:
                run(cfg, trial)
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                return trial
            except Exception as exc:  # noqa: BLE001 - try the next config
                last = exc
        raise SolkitError(f"autotune: no config of {getattr(self.fn, '__name__', 'kernel')} runs: {last}")

    def _compile_job_factory(self, args: tuple, kwargs: Mapping[str, Any]) -> Callable[[Config], CompileJob] | None:
        inner = self.fn
        module = getattr(getattr(inner, "fn", inner), "__module__", None)
        name = getattr(inner, "__name__", None)
        if not module or module == "__main__" or not name or interpreter_mode() or not torch.cuda.is_available():
            return None  # workers could not import it: compile lazily in this process
        mock = tuple(a.dtype if isinstance(a, torch.Tensor) else a for a in args)

        def job(config: Config) -> CompileJob:
            meta, launch = _split(self.space, config)
            return CompileJob(module, name, mock, {**kwargs, **meta, **launch})

        return job

    def _cache_key(self, named: Mapping[str, Any]) -> dict[str, Any]:
        shape = {k: named.get(k) for k in self.key}
        dtypes = [str(named[n].dtype) for n in self.arg_names if isinstance(named.get(n), torch.Tensor)]
        return make_key(source_hash(self.fn), shape, dtypes, environment(), bucket=self.bucket)

    def _tune(self, args, kwargs, grid, named, space: Space) -> TuneResult:
        problem = self._problem(args, kwargs, grid, named, space)
        cache_key = self._cache_key(named) if self.cache is not None else None
        budget = self.budget if self.budget is not None else len(space)
        if problem.compile_job is not None and self._pool is None and len(space) > 1:
            # no more workers than configs in the list (each holds a CUDA context once it has loaded a binary)
            self._pool = CompilePool(workers=min(len(self.space), max(1, min(16, (os.cpu_count() or 2) - 1))))
        deferred = _Deferred(self.cache) if self.cache is not None else None
        try:
            result = tune(problem, space, strategy=self.strategy, budget=budget, seed=self.seed, cache=deferred,
                          cache_key=cache_key, pool=self._pool, settings=self.settings)  # type: ignore[arg-type]  # fmt: skip
            if deferred is not None and result.best is not None:
                deferred.commit()
            return result
        finally:
            for n, v in problem.meta["restore"].items():
                named[n].copy_(v)


class _Deferred:
    """The cache as :func:`tune` sees it, holding a tuning's new records until it has a winner: a tuning
    where no config passed (say, the first call's inputs held NaN, so nothing could match the
    reference) must not leave records that make every later process fail the same key unmeasured."""

    def __init__(self, cache: TuneCache) -> None:
        self.cache = cache
        self.pending: list[tuple[Mapping[str, Any], list]] = []

    def load(self, key: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        return self.cache.load(key)

    def prior(self, key: Mapping[str, Any]) -> Any:
        return self.cache.prior(key)

    def add(self, key: Mapping[str, Any], records: Any) -> None:
        self.pending.append((key, list(records)))

    def commit(self) -> None:
        for key, records in self.pending:
            self.cache.add(key, records)
        self.pending.clear()


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _as_triton(triton: Any, space: Space, config: Config) -> Any:
    meta, launch = _split(space, config)
    return triton.Config(dict(meta), **launch)


def _changed(before: tuple, after: tuple) -> list[int]:
    out = []
    for i, (b, a) in enumerate(zip(before, after)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and not torch.equal(a, b):
            out.append(i)
    return out


def autotune(
    configs: Sequence[Any] | None = None,
    key: Sequence[str] = (),
    prune_configs_by: Mapping[str, Any] | None = None,
    reset_to_zero: Sequence[str] | None = None,
    restore_value: Sequence[str] | None = None,
    pre_hook: Callable | None = None,
    post_hook: Callable | None = None,
    warmup: int | None = None,
    rep: int | None = None,
    use_cuda_graph: bool = False,
    do_bench: Callable | None = None,
    cache_results: bool = True,
    *,
    space: Space | Mapping[str, Any] | None = None,
    budget: int | None = None,
    strategy: str | None = None,
    cache: TuneCache | None = None,
    reference: Callable | None = None,
    bucket: str = "pow2",
    seed: int = 0,
    settings: BenchSettings | None = None,
    outputs: Sequence[str] | None = None,
) -> Callable[[Any], Autotuner]:
    """``triton.autotune``'s signature plus ``space=`` (a :class:`Space` or its dict form) and ``budget=``
    (evaluations; default: the whole list in list mode, 30 in search mode).

    ``reference(*args, **kwargs)`` (the launch's arguments) returns the expected output(s) in a higher
    precision; ``outputs`` names the (positional) arguments the kernel writes, which the correctness
    gate compares with it (default: the tensors the first working config changes -- name them when
    the kernel also writes scratch buffers whose contents differ between configs)."""
    del warmup, rep, use_cuda_graph, do_bench  # the harness protocol decides (see module docstring)
    if space is not None and budget is None:
        from solkit.tune.strategies import DEFAULT_BUDGET

        budget = DEFAULT_BUDGET

    def decorate(fn: Any) -> Autotuner:
        return Autotuner(fn, configs, key, space=space, budget=budget, strategy=strategy,
                         prune_configs_by=prune_configs_by, reset_to_zero=reset_to_zero, restore_value=restore_value,
                         pre_hook=pre_hook, post_hook=post_hook, cache_results=cache_results, cache=cache,
                         reference=reference, bucket=bucket, seed=seed, settings=settings,
                         outputs=outputs)  # fmt: skip

    return decorate
