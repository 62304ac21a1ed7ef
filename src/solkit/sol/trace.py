# Just over 500 lines: the recorder, the function layer and the boundary they both feed stay in one place.
"""Trace a PyTorch callable on meta tensors and record every aten op it runs.

Tracing never touches tensor data, so it allocates no tensor storage: the inputs are ``meta``
tensors (shape, dtype and strides only), factory calls inside the traced function default to the
``meta`` device, and an explicit ``device=...`` (``"cuda"`` in a reference written for a GPU) is
rewritten to ``meta``. A 16384 × 128256 cross-entropy or a 70B-shaped GEMM traces in milliseconds.

Two interception layers cooperate:

* a :class:`~torch.utils._python_dispatch.TorchDispatchMode` records each aten op after
  decomposition (``aten.mm``, ``aten._log_softmax``, ...) with the shapes, dtypes and strides of the
  tensors it reads and writes, and whether it is a view (views move no bytes);
* a :class:`~torch.overrides.TorchFunctionMode` rewrites devices, makes the casts of an enabled
  ``torch.autocast`` explicit (:mod:`solkit.sol.autocast`; meta tensors bypass autocast) and keeps
  ``F.scaled_dot_product_attention`` as *one* op: on meta tensors PyTorch would otherwise run its
  math decomposition (explicit mask, two ``bmm`` and a softmax), losing ``is_causal``. The
  attention op is recorded with its arguments, and its backward (when autograd runs) is recorded
  as ``scaled_dot_product_attention_backward``, the way a fused FlashAttention kernel pair runs.

What crosses the boundary of the traced call (:attr:`OpTrace.boundary`): its tensor arguments, and,
when ``fn`` is an ``nn.Module``, every parameter and buffer (named ``fc1.weight``), swapped in as meta
tensors through ``torch.func.functional_call``; any other tensor an op reads that the call did not
produce (a module captured in a closure, a constant tensor) is a ``captured`` boundary input. Each
tensor is identified by its ``TensorImpl`` (``key``), which survives autograd re-wrapping a saved
tensor, so one tensor is one input however often it is read. Boundary tensors written in place (a
batch norm's running statistics) and gradients the call leaves in a parameter's ``.grad`` are written
across the boundary too (:attr:`OpTrace.written`).

Data-dependent ops (``.item()``, ``nonzero``) cannot run on meta tensors; they raise a one-line
:class:`~solkit.errors.SolkitError`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.weak import WeakIdKeyDictionary

from solkit.errors import SolkitError
from solkit.sol.autocast import autocast_args

#: Ops that overwrite their first argument without reading it (``copy_``, ``fill_``, RNG fills).
OVERWRITE_OPS = frozenset({"copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "exponential_"})
#: Ops whose schema says "fresh tensor" but that PyTorch implements as a view.
EXTRA_VIEW_OPS = frozenset({"_unsafe_view", "lift_fresh", "_reshape_alias"})
#: Ops that update running statistics in place in training without saying so in their schema.
STATS_UPDATE_OPS = frozenset({"native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm", "batch_norm_update_stats"})
#: Ops carrying no tensor work at all (device/metadata queries).
SKIPPED_NAMESPACES = frozenset({"prim"})


@dataclass(frozen=True)
class TensorMeta:
    """Shape, dtype and strides of a tensor seen while tracing."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    stride: tuple[int, ...]
    key: int = field(default=0, compare=False, repr=False)  # the tensor's identity in its trace (see key_of)

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorMeta:
        return cls(tuple(int(s) for s in t.shape), t.dtype, tuple(int(s) for s in t.stride()), key_of(t))

    @property
    def dim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Logical size: numel × bytes per element."""
        return self.numel * self.itemsize

    @property
    def footprint_bytes(self) -> int:
        """Bytes of the distinct elements addressed: a broadcast (stride-0) dimension is read once."""
        n = 1
        for size, stride in zip(self.shape, self.stride):
            if stride != 0:
                n *= size
        return (n if self.numel else 0) * self.itemsize

    @property
    def is_floating(self) -> bool:
        return self.dtype.is_floating_point or self.dtype.is_complex

    def __repr__(self) -> str:
        return f"{str(self.dtype).removeprefix('torch.')}{list(self.shape)}"


def key_of(t: torch.Tensor) -> int:
    """A tensor's identity while it lives: its TensorImpl address.

    ``id(t)`` would not do: autograd hands a saved tensor back to the backward in a new Python object.
    An address can be reused after the tensor is freed, so a reader follows records in order and
    takes the latest producer of a key (see :mod:`solkit.sol.opview`).
    """
    return int(t._cdata)


@dataclass
class OpRecord:
    """One aten op as it ran: which tensors it read and wrote, and its named arguments."""

    name: str  # overload packet name without namespace, e.g. "mm", "add_", "_log_softmax"
    namespace: str  # "aten", or "solkit" for ops kept whole by the function mode (attention)
    overload: str
    inputs: list[TensorMeta]  # tensors read
    outputs: list[TensorMeta]  # tensors written
    args: dict[str, Any]  # every schema argument by name, tensors replaced by TensorMeta
    is_view: bool = False
    input_ids: list[int] = field(default_factory=list)  # key_of each tensor read (aligned with inputs)
    output_ids: list[int] = field(default_factory=list)  # key_of each tensor written (aligned with outputs)
    written_ids: list[int] = field(default_factory=list)  # keys of arguments written in place (add_, copy_, out=)
    origins: dict[int, Any] = field(default_factory=dict)  # key -> storage Origin (solkit.sol.precision)

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.name}"

    @property
    def base_name(self) -> str:
        """The name without the in-place suffix: ``add_`` -> ``add`` (``__and__``-style names kept)."""
        n = self.name
        return n[:-1] if n.endswith("_") and not n.endswith("__") else n


@dataclass(frozen=True)
class BoundaryTensor:
    """A tensor crossing the boundary of a traced call."""

    name: str  # "x" (the argument's name), "arg0", "fc1.weight", "captured0"; "fc1.weight.grad" when written
    kind: str  # "input", "parameter", "buffer" or "captured"; "grad" for a parameter's gradient
    meta: TensorMeta

    @property
    def key(self) -> int:
        return self.meta.key


@dataclass
class OpTrace:
    """The ops a traced call ran, and its external inputs and outputs."""

    records: list[OpRecord]
    inputs: list[TensorMeta]  # every boundary input (arguments, parameters, buffers, captured), read once
    outputs: list[TensorMeta]  # the distinct tensors of the return value
    result: Any = field(default=None, repr=False)  # the meta output of the call
    input_ids: list[int] = field(default_factory=list)  # key of each input, matching OpRecord.input_ids
    boundary: list[BoundaryTensor] = field(default_factory=list)  # the inputs with their names and kinds
    written: list[BoundaryTensor] = field(default_factory=list)  # inputs written in place and .grad left behind


def _meta(x: Any) -> Any:
    return TensorMeta.of(x) if isinstance(x, torch.Tensor) else x


def _named_args(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict[str, Any]:
    named: dict[str, Any] = {}
    schema_args = func._schema.arguments
    for i, a in enumerate(schema_args):
        if i < len(args) and not a.kwarg_only:
            named[a.name] = args[i]
        elif a.name in kwargs:
            named[a.name] = kwargs[a.name]
        elif a.has_default_value():
            named[a.name] = a.default_value
        else:
            named[a.name] = None
    return named


def _tensors(x: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _unique(ts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    seen: set[int] = set()
    out = []
    for t in ts:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


class _Recorder(TorchDispatchMode):
    """Records each aten op with the tensors it reads and writes.

    It also keeps the keys of the tensors the call produced, so that a tensor read without having
    been produced or passed in is recognised as captured (``captured``), and the keys of tensors
    written in place (``mutated``).
    """

    def __init__(self, known: set[int] | None = None) -> None:
        super().__init__()
        self.records: list[OpRecord] = []
        self.paused = 0
        self.known: set[int] = set(known or ())
        self.captured: dict[int, tuple[str, str, TensorMeta]] = {}  # key -> (name, kind, meta)
        self.mutated: set[int] = set()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Nothing is compiled under this mode; without this PyTorch wraps __torch_dispatch__ in
        # torch._dynamo.disable, whose first use imports torch._dynamo (~2 s per process).
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.paused or func.namespace in SKIPPED_NAMESPACES:
            return out
        rec = self.make_record(func, args, kwargs, out)
        if rec.outputs:  # no tensor written: a metadata query (sizes, is_same_size), no work
            self.add(rec)
        return out

    def add(self, rec: OpRecord) -> None:
        for key, meta in zip(rec.input_ids, rec.inputs):
            if key not in self.known and key not in self.captured:
                self.captured[key] = ("", "captured", meta)
        self.known.update(rec.output_ids)
        if rec.written_ids:
            self.mutated.update(rec.written_ids)
        self.records.append(rec)

    @staticmethod
    def make_record(func, args: tuple, kwargs: dict, out: Any) -> OpRecord:
        name = func._overloadpacket.__name__
        named = _named_args(func, args, kwargs)
        written_args: list[torch.Tensor] = []  # mutated arguments
        unread: set[int] = set()  # arguments written without being read (out=, copy_ destination)
        for a in func._schema.arguments:
            info = a.alias_info
            if info is not None and info.is_write:
                ts = _tensors(named.get(a.name))
                written_args += ts
                if a.kwarg_only or name in OVERWRITE_OPS:
                    unread.update(id(t) for t in ts)
        if name in STATS_UPDATE_OPS and named.get("training", True):
            written_args += _tensors([named.get("running_mean"), named.get("running_var")])
        reads = _unique([t for t in _tensors(named) if id(t) not in unread])
        writes = _unique(_tensors(out) or written_args)
        is_view = bool(func.is_view) or name in EXTRA_VIEW_OPS or (name == "detach") or (name == "alias")
        return OpRecord(
            name=name,
            namespace=func.namespace,
            overload=func._overloadname,
            inputs=[TensorMeta.of(t) for t in reads],
            input_ids=[key_of(t) for t in reads],
            outputs=[TensorMeta.of(t) for t in writes],
            output_ids=[key_of(t) for t in writes],
            args=tree_map(_meta, named),
            is_view=is_view,
            written_ids=[key_of(t) for t in written_args],
        )


def _solkit_record(name: str, ins: list[torch.Tensor], outs: list[torch.Tensor], args: dict) -> OpRecord:
    """A record of an op kept whole (namespace ``solkit``)."""
    reads = _unique(ins)
    return OpRecord(
        name=name,
        namespace="solkit",
        overload="default",
        inputs=[TensorMeta.of(t) for t in reads],
        input_ids=[key_of(t) for t in reads],
        outputs=[TensorMeta.of(t) for t in outs],
        output_ids=[key_of(t) for t in outs],
        args=tree_map(_meta, args),
    )


class _AttentionOp(torch.autograd.Function):
    """Scaled-dot-product attention kept whole: forward and backward recorded as one op each.

    On meta tensors nothing is computed; the backward just returns correctly shaped gradients.
    """

    @staticmethod
    def forward(ctx, recorder, attrs, query, key, value, attn_mask):
        recorder.paused += 1
        try:
            with torch.no_grad():
                out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, **attrs)
            # A fused kernel keeps the per-row log-sum-exp (fp32) for its backward.
            needs_grad = any(ctx.needs_input_grad[2:])
            lse = torch.empty(query.shape[:-1], dtype=torch.float32, device=query.device) if needs_grad else None
        finally:
            recorder.paused -= 1
        ins = [query, key, value] + ([attn_mask] if isinstance(attn_mask, torch.Tensor) else [])
        args = {"query": query, "key": key, "value": value, "attn_mask": attn_mask, **attrs}
        outs = [out] + ([lse] if lse is not None else [])
        recorder.add(_solkit_record("scaled_dot_product_attention", ins, outs, args))
        ctx.recorder, ctx.attrs = recorder, attrs
        ctx.metas = (query, key, value, attn_mask, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, attn_mask, out, lse = ctx.metas
        recorder = ctx.recorder
        recorder.paused += 1
        try:
            grads = [
                torch.empty_like(t) if need else None for t, need in zip((query, key, value), ctx.needs_input_grad[2:5])
            ]
            mask_needs = isinstance(attn_mask, torch.Tensor) and ctx.needs_input_grad[5]
            grad_mask = torch.empty_like(attn_mask) if mask_needs else None
        finally:
            recorder.paused -= 1
        ins = [grad_out, query, key, value, out] + ([lse] if lse is not None else [])
        if isinstance(attn_mask, torch.Tensor):
            ins.append(attn_mask)
        args = {"query": query, "key": key, "value": value, "attn_mask": attn_mask, **ctx.attrs}
        outs = [t for t in grads + [grad_mask] if t is not None]
        recorder.add(_solkit_record("scaled_dot_product_attention_backward", ins, outs, args))
        return (None, None, *grads, grad_mask)


_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


class _FunctionLayer(TorchFunctionMode):
    """Keeps every tensor on ``meta`` and attention whole (see the module docstring)."""

    def __init__(self, recorder: _Recorder, names: WeakIdKeyDictionary | None = None) -> None:
        super().__init__()
        self.recorder = recorder
        self.names = names if names is not None else WeakIdKeyDictionary()  # tensor -> (name, kind)
        self.metas = WeakIdKeyDictionary()  # a tensor on a real device -> its one meta stand-in
        self.casts = WeakIdKeyDictionary()  # autocast's weight cache
        self.stand_ins: list[tuple[str, torch.Tensor]] = []

    def _meta_of(self, x: Any) -> Any:
        """A captured tensor on a real device (a closure's model on the CPU) -> the same meta tensor each time.

        The stand-in is a captured boundary input, named after the module's parameter or buffer when known.
        """
        if not isinstance(x, torch.Tensor) or x.is_meta:
            known = isinstance(x, torch.Tensor) and (
                key_of(x) in self.recorder.captured or key_of(x) in self.recorder.known
            )
            if isinstance(x, torch.Tensor) and x in self.names and not known:
                self.recorder.captured[key_of(x)] = (*self.names[x], TensorMeta.of(x))
            return x
        m = self.metas.get(x)
        if m is None:
            self.recorder.paused += 1
            try:
                m = self.metas[x] = to_meta(x)
            finally:
                self.recorder.paused -= 1
            name, kind = self.names.get(x, ("", "captured"))
            self.recorder.captured[key_of(m)] = (name, kind, TensorMeta.of(m))
            self.stand_ins.append((name, m))
        return m

    def __torch_function__(self, func, types, args=(), kwargs=None):
        args, kwargs = tree_map(self._meta_of, (tuple(args), dict(kwargs or {})))
        args, kwargs = autocast_args(func, args, kwargs, self.casts)
        if func is F.scaled_dot_product_attention:
            named = dict(zip(_SDPA_PARAMS, args))
            named.update(kwargs)
            attrs = {k: named[k] for k in ("dropout_p", "is_causal", "scale", "enable_gqa") if k in named}
            return _AttentionOp.apply(
                self.recorder, attrs, named["query"], named["key"], named["value"], named.get("attn_mask")
            )
        if func in (torch.Tensor.cuda, torch.Tensor.cpu):
            return args[0]
        if func is torch.Tensor.to:
            return _to_without_device(args, kwargs)
        if "device" in kwargs and kwargs["device"] is not None:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


def _to_without_device(args: tuple, kwargs: dict) -> Any:
    """``Tensor.to`` with every device dropped (dtype conversions kept)."""
    self, rest = args[0], list(args[1:])
    kwargs.pop("device", None)
    kept = []
    for a in rest:
        if isinstance(a, (str, torch.device, int)) and not isinstance(a, bool):
            continue
        if isinstance(a, torch.Tensor):  # .to(other): only its dtype matters here
            a = a.dtype
        kept.append(a)
    if not kept and not set(kwargs) - {"non_blocking", "copy"}:
        return self.clone() if kwargs.get("copy") else self
    return self.to(*kept, **kwargs)


def to_meta(x: Any) -> Any:
    """A tensor (any device) -> a meta tensor with the same shape, dtype, strides and requires_grad."""
    if isinstance(x, torch.Tensor) and not x.is_meta:
        m = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
        return m.requires_grad_(x.requires_grad) if x.requires_grad else m
    return x


def _argument_boundary(args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    """Each distinct tensor among the arguments with a name: ``arg0``, ``arg1.0`` (nested), ``x`` (keyword)."""
    named: list[tuple[str, torch.Tensor]] = []
    for prefix, value in [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items()):
        leaves = _tensors(value)
        if isinstance(value, torch.Tensor):
            named.append((prefix, value))
        else:
            named += [(f"{prefix}.{j}", t) for j, t in enumerate(leaves)]
    seen: set[int] = set()
    return [(n, t) for n, t in named if not (id(t) in seen or seen.add(id(t)))]


def _module_state(module: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Meta copies of a module's parameters and buffers (tied ones once), and each one's kind."""
    state: dict[str, torch.Tensor] = {}
    kinds: dict[str, str] = {}
    for kind, items in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for name, t in items:
            state[name] = to_meta(t)
            kinds[name] = kind
    return state, kinds


def _names_of(module: torch.nn.Module | None) -> WeakIdKeyDictionary:
    names = WeakIdKeyDictionary()
    if module is not None:
        for kind, items in (("buffer", module.named_buffers()), ("parameter", module.named_parameters())):
            for n, t in items:
                names[t] = (n, kind)
    return names


def trace(fn: Callable[..., Any], *args: Any, module: torch.nn.Module | None = None, **kwargs: Any) -> OpTrace:
    """Run ``fn(*args, **kwargs)`` on meta tensors and record its ops.

    Tensor arguments on other devices are converted to meta first (no data is copied). The boundary
    inputs are the distinct tensors among the arguments, then (when ``fn`` is an ``nn.Module``) its
    parameters and buffers, then each captured tensor an op reads (named after ``module``'s parameters
    and buffers when ``fn`` is a closure over it); the outputs are the distinct tensors of the return value.
    """
    args, kwargs = tree_map(to_meta, (args, kwargs))
    named = [(n, "input", t) for n, t in _argument_boundary(args, kwargs)]
    call: Callable[..., Any] = fn
    state: dict[str, torch.Tensor] = {}
    if isinstance(fn, torch.nn.Module):
        state, kinds = _module_state(fn)
        named += [(n, kinds[n], t) for n, t in state.items()]
        call = functools.partial(torch.func.functional_call, fn, state)
        args, kwargs = (args, kwargs), {}
    recorder = _Recorder(known={key_of(t) for _, _, t in named})
    layer = _FunctionLayer(recorder, _names_of(module))
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    try:
        with torch.device("meta"), layer, recorder:
            result = call(*args, **kwargs)
    except SolkitError:
        raise
    except Exception as exc:  # the reference's own error, or an op meta tensors cannot run
        last = recorder.records[-1].qualified_name if recorder.records else "the start"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        hint = ""
        if "meta" in first or "data-dependent" in first or "item()" in first:
            hint = " (solkit traces shapes only, on meta tensors; an op that needs tensor values cannot be analysed)"
        raise SolkitError(f"tracing {name} failed after {last}: {type(exc).__name__}: {first[:300]}{hint}") from None
    boundary = [BoundaryTensor(n, kind, TensorMeta.of(t)) for n, kind, t in named]
    # A one-element captured tensor (``torch.tensor(2.0)`` in the body) is a literal a kernel folds in.
    captured = [(n, kind, m) for n, kind, m in recorder.captured.values() if m.numel > 1 or kind != "captured"]
    boundary += [BoundaryTensor(n or f"captured{i}", kind, m) for i, (n, kind, m) in enumerate(captured)]
    outputs = _unique(_tensors(result))
    returned = {key_of(t) for t in outputs}
    written = [b for b in boundary if b.key in recorder.mutated and b.key not in returned]
    for n, t in list(state.items()) + layer.stand_ins:
        if t.grad is not None and key_of(t.grad) not in returned:
            written.append(BoundaryTensor(f"{n or 'captured'}.grad", "grad", TensorMeta.of(t.grad)))
    return OpTrace(
        records=recorder.records,
        inputs=[b.meta for b in boundary],
        outputs=[TensorMeta.of(t) for t in outputs],
        result=result,
        input_ids=[b.key for b in boundary],
        boundary=boundary,
        written=written,
    )


def iter_tensor_metas(x: Any) -> Iterator[TensorMeta]:
    """TensorMeta leaves of a (possibly nested) argument."""
    for leaf in tree_flatten(x)[0]:
        if isinstance(leaf, TensorMeta):
            yield leaf
