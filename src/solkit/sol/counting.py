# Over 500 lines on purpose: one table of per-op FLOP/byte rules, each op's rule found in one place.
"""FLOPs and bytes of each traced op, with the FLOPs charged to the math unit that does them.

Matrix work has exact formulas here (FLOP = one multiply or one add, so a multiply-accumulate is 2):

* ``mm``/``bmm``/``addmm``/``baddbmm``/``addbmm`` (what ``linear`` and ``matmul`` decompose into):
  ``2·M·N·K`` per matrix product, plus ``M·N`` when a bias or ``beta·C`` is added (``beta = 0``
  adds nothing). The work goes to ``<dtype>_tensor`` for the dtype :mod:`solkit.sol.precision`
  charges: on the default ``fastest`` basis the storage dtype the operands originate in (a bf16
  tensor upcast to fp32 is charged at bf16), on ``as_written`` the dtype computed in; fp32 goes to
  ``tf32_tensor`` only when TF32 is allowed (matmuls: ``torch.backends.cuda.matmul.allow_tf32``;
  convolutions on ``fastest``: ``torch.backends.cudnn.allow_tf32``), else to ``fp32_vector``.
* ``convolution``: ``2·N·Cout·Hout·Wout·(Cin/groups)·kh·kw`` (any number of spatial dims), plus
  one add per output element for the bias; the backward counts the same for each of grad_input and
  grad_weight, and one add per grad_output element for grad_bias.
* attention (``scaled_dot_product_attention`` and the aten kernels ``_scaled_dot_product_flash_attention``,
  ``_efficient_attention``, ``_cudnn_attention``, ``_flash_attention_forward``, ...): forward
  ``2·B·H·Sq·Sk·(D + Dv)`` = ``4·B·H·Sq·Sk·D`` for the two products QKᵀ and PV; a causal mask
  halves it (the FlashAttention convention: half the score matrix is skipped); an explicit mask
  does not. Backward = 2.5 × forward (five products of that size instead of two: the QKᵀ
  recompute, dV, dP, dQ and dK). The softmax inside a fused attention kernel is not counted.

Everything else follows the per-op table in ``data/flop_rules.yaml`` and goes to ``fp32_vector``
(``fp64_vector`` for float64 math). An op with no rule is returned with ``counted=False``: the
analysis lists it under ``uncounted`` instead of treating it as free.

Bytes are what an op-by-op execution moves: the distinct elements of every tensor read plus every
tensor written (a broadcast dimension is read once); views move nothing; gathers read only the
selected rows; in-place scatters write only the scattered values.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import torch
import yaml

from solkit.errors import SolkitError
from solkit.sol.precision import Precision, annotate_origins, charged_dtype, origin
from solkit.sol.trace import OpRecord, TensorMeta


@dataclass
class OpCount:
    """FLOPs (by unit) and bytes of one op call."""

    op: str
    flops: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    counted: bool = True
    note: str = ""

    @property
    def flops_total(self) -> int:
        return sum(self.flops.values())

    @property
    def unit(self) -> str:
        """The unit doing most of this op's FLOPs ("" for pure data movement)."""
        live = {u: f for u, f in self.flops.items() if f}
        return max(live, key=live.get) if live else ""


# ----------------------------------------------------------------------------------------------
# Units


def default_allow_tf32() -> bool:
    """PyTorch's current precision policy for fp32 matmuls on CUDA."""
    return bool(torch.backends.cuda.matmul.allow_tf32)


_FP8 = {
    getattr(torch, n)
    for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
    if hasattr(torch, n)
}
_FP4 = {getattr(torch, n) for n in ("float4_e2m1fn_x2",) if hasattr(torch, n)}


def tensor_unit(dtype: torch.dtype, allow_tf32: bool) -> str | None:
    """The math unit a matrix product with operands of ``dtype`` runs on (None: no tensor unit)."""
    if dtype == torch.bfloat16:
        return "bf16_tensor"
    if dtype == torch.float16:
        return "fp16_tensor"
    if dtype == torch.float32:
        return "tf32_tensor" if allow_tf32 else "fp32_vector"
    if dtype == torch.float64:
        return "fp64_tensor"
    if dtype in _FP8:
        return "fp8_tensor"
    if dtype in _FP4:
        return "fp4_tensor"
    if dtype in (torch.int8, torch.uint8):
        return "int8_tensor"
    return None


def vector_unit(dtype: torch.dtype) -> str:
    return "fp64_vector" if dtype in (torch.float64, torch.complex128) else "fp32_vector"


def _compute_dtype(rec: OpRecord) -> torch.dtype | None:
    """The floating dtype an op computes in (None for integer/boolean work)."""
    for t in (*rec.inputs, *rec.outputs):
        if t.is_floating:
            return t.dtype
    return None


# ----------------------------------------------------------------------------------------------
# The rule table


@functools.lru_cache(maxsize=1)
def rule_table() -> dict[str, Any]:
    """The parsed ``data/flop_rules.yaml`` (validated once)."""
    text = resources.files("solkit.sol").joinpath("data/flop_rules.yaml").read_text()
    data = yaml.safe_load(text)
    kinds = {"elementwise", "reduction", "movement", "gather", "scatter", "alloc", "view"}
    for name, rule in data["ops"].items():
        if rule.get("kind") not in kinds:
            raise SolkitError(f"flop_rules.yaml: ops.{name}.kind must be one of {sorted(kinds)}")
    return data


def _bytes_default(rec: OpRecord) -> int:
    return sum(t.footprint_bytes for t in rec.inputs) + sum(t.footprint_bytes for t in rec.outputs)


def _self_arg(rec: OpRecord) -> TensorMeta | None:
    """The first tensor argument: the source of a gather (``self``; ``weight`` of ``embedding``)."""
    return next((v for v in rec.args.values() if isinstance(v, TensorMeta)), None)


def _others(rec: OpRecord) -> list[TensorMeta]:
    """Tensor inputs other than ``self`` (indices, values)."""
    me = _self_arg(rec)
    out, skipped = [], False
    for t in rec.inputs:
        if not skipped and me is not None and t == me:
            skipped = True
            continue
        out.append(t)
    return out


def _vector(rec: OpRecord, per_element: int, n: int) -> dict[str, int]:
    dt = _compute_dtype(rec)
    if dt is None or not per_element or not n:
        return {}
    return {vector_unit(dt): per_element * n}


def _table_rule(rec: OpRecord, rule: dict[str, Any]) -> OpCount:
    kind = rule["kind"]
    op = rec.qualified_name
    note = rule.get("note", "")
    if kind in ("view", "alloc"):
        return OpCount(op, {}, 0, True, note)
    if kind == "movement":
        return OpCount(op, {}, _bytes_default(rec), True, note)
    if kind == "gather":
        out_bytes = sum(t.nbytes for t in rec.outputs)
        return OpCount(op, {}, sum(t.footprint_bytes for t in _others(rec)) + 2 * out_bytes, True, note)
    if kind == "scatter":
        if not rec.name.endswith("_"):  # functional form: a full new tensor is written
            values = max((t.numel for t in _others(rec) if t.is_floating), default=0)
            return OpCount(op, _vector(rec, rule.get("flops", 0), values), _bytes_default(rec), True, note)
        others = _others(rec)
        me = _self_arg(rec)
        values = max((t.numel for t in others if t.is_floating), default=0) or max((t.numel for t in others), default=0)
        accumulates = bool(rule.get("accumulates")) or bool(
            rule.get("accumulate_arg") and rec.args.get(rule["accumulate_arg"])
        )
        flops = rule.get("accumulate_flops", rule.get("flops", 0)) if accumulates else rule.get("flops", 0)
        itemsize = me.itemsize if me is not None else 0
        written = values * itemsize * (2 if accumulates else 1)
        return OpCount(op, _vector(rec, flops, values), sum(t.footprint_bytes for t in others) + written, True, note)
    if kind == "elementwise":
        n = max((t.numel for t in rec.outputs), default=0) or max((t.numel for t in rec.inputs), default=0)
    else:  # reduction
        n = max((t.numel for t in rec.inputs), default=0)
    return OpCount(op, _vector(rec, int(rule["flops"]), n), _bytes_default(rec), True, note)


# ----------------------------------------------------------------------------------------------
# Matrix products


def _t(rec: OpRecord, name: str) -> TensorMeta | None:
    v = rec.args.get(name)
    return v if isinstance(v, TensorMeta) else None


def _gemm(
    rec: OpRecord,
    p: Precision,
    flops: int,
    operands: list[TensorMeta | None],
    note: str,
    extra: int = 0,
    conv: bool = False,
) -> OpCount:
    """Matrix work on the unit :mod:`solkit.sol.precision` charges for ``operands`` (the first is as written)."""
    ops = [t for t in operands if t is not None]
    a = ops[0]
    dtype = charged_dtype(a.dtype, [origin(rec, t) for t in ops], p)
    tf32 = p.tf32(conv)
    unit = tensor_unit(dtype, tf32)
    if unit is None:
        return OpCount(rec.qualified_name, {}, _bytes_default(rec), False, f"no tensor unit for {a.dtype}")
    if dtype != a.dtype:
        note += f"; computed in {_short(a.dtype)} from {_short(dtype)} storage: charged at {unit}"
    elif dtype == torch.float32:
        switch = "cudnn.allow_tf32" if conv and p.basis == "fastest" else "matmul.allow_tf32"
        note += f"; fp32 as TF32 ({switch})" if tf32 else f"; fp32 on the vector unit ({switch} off)"
    return OpCount(rec.qualified_name, {unit: flops + extra}, _bytes_default(rec), True, note)


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _beta_nonzero(rec: OpRecord) -> bool:
    beta = rec.args.get("beta", 1)
    return beta is None or beta != 0


def _k_of(a: TensorMeta) -> int:
    k = a.shape[-1]
    return 2 * k if a.dtype in _FP4 else k  # two fp4 values per byte, packed along K


def _rule_mm(rec: OpRecord, p: Precision) -> OpCount:
    a, b = _t(rec, "self"), _t(rec, "mat2")
    m, k, n = a.shape[0], _k_of(a), b.shape[-1]
    note = f"2*M*N*K, M={m} N={n} K={k}"
    extra = 0
    if rec.base_name in ("_scaled_mm",) and _t(rec, "bias") is not None:
        extra, note = m * n, note + " + M*N bias"
    return _gemm(rec, p, 2 * m * n * k, [a, b], note, extra)


def _rule_addmm(rec: OpRecord, p: Precision) -> OpCount:
    a, b = _t(rec, "mat1"), _t(rec, "mat2")
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    note = f"2*M*N*K, M={m} N={n} K={k}"
    extra = 0
    if _beta_nonzero(rec):
        extra, note = m * n, note + " + M*N bias/beta*C add"
    if rec.base_name == "_addmm_activation":
        act = 5 if rec.args.get("use_gelu") else 1
        extra, note = extra + act * m * n, note + f" + {act}*M*N activation"
    return _gemm(rec, p, 2 * m * n * k, [a, b], note, extra)


def _rule_bmm(rec: OpRecord, p: Precision) -> OpCount:
    a, b = _t(rec, "self"), _t(rec, "mat2")
    bsz, m, k, n = a.shape[0], a.shape[1], a.shape[2], b.shape[2]
    return _gemm(rec, p, 2 * bsz * m * n * k, [a, b], f"2*B*M*N*K, B={bsz} M={m} N={n} K={k}")


def _rule_baddbmm(rec: OpRecord, p: Precision) -> OpCount:
    a, b = _t(rec, "batch1"), _t(rec, "batch2")
    bsz, m, k, n = a.shape[0], a.shape[1], a.shape[2], b.shape[2]
    note = f"2*B*M*N*K, B={bsz} M={m} N={n} K={k}"
    extra = bsz * m * n if _beta_nonzero(rec) else 0
    if extra:
        note += " + B*M*N add" if rec.base_name == "baddbmm" else " + B*M*N batch sum and add"
    return _gemm(rec, p, 2 * bsz * m * n * k, [a, b], note, extra)


def _rule_grouped_mm(rec: OpRecord, p: Precision) -> OpCount:
    a, b = _t(rec, "self"), _t(rec, "mat2")
    if a.dim == 2:  # 2-D x 3-D: rows split into groups, one weight each; 2-D x 2-D: K split into groups
        flops = 2 * a.shape[0] * _k_of(a) * b.shape[-1]
    else:  # a 3-D: per-group products, out = G x M x N (or M x Ntot)
        out = rec.outputs[0]
        flops = 2 * out.numel * _k_of(a)
    return _gemm(rec, p, flops, [a, b], "2*M*N*K summed over groups")


def _rule_mv(rec: OpRecord, p: Precision) -> OpCount:
    a = _t(rec, "mat") or _t(rec, "self")
    m, k = a.shape[0], a.shape[1]
    extra = m if rec.base_name == "addmv" and _beta_nonzero(rec) else 0
    dt = _compute_dtype(rec)
    unit = vector_unit(dt) if dt is not None else None
    if unit is None:
        return OpCount(rec.qualified_name, {}, _bytes_default(rec), False, f"no unit for {a.dtype} matrix-vector")
    note = f"2*M*K, M={m} K={k}; a matrix-vector product runs on the vector unit"
    return OpCount(rec.qualified_name, {unit: 2 * m * k + extra}, _bytes_default(rec), True, note)


def _rule_addr(rec: OpRecord, p: Precision) -> OpCount:
    out = rec.outputs[0]
    return OpCount(rec.qualified_name, _vector(rec, 2, out.numel), _bytes_default(rec), True, "outer product + add")


# ----------------------------------------------------------------------------------------------
# Convolution


def _conv_flops(numel: int, weight: TensorMeta) -> int:
    """2 x numel x (weight elements per leading channel).

    Forward: ``numel`` = output elements and the weight is Cout x Cin/groups x k..., so each output
    element takes Cin/groups*prod(k) multiply-adds. Transposed: ``numel`` = input elements and the
    weight is Cin x Cout/groups x k..., so each input element feeds Cout/groups*prod(k) outputs.
    """
    return 2 * numel * (weight.numel // weight.shape[0])


def _rule_convolution(rec: OpRecord, p: Precision) -> OpCount:
    x, w, out = _t(rec, "input"), _t(rec, "weight"), rec.outputs[0]
    transposed = bool(rec.args.get("transposed"))
    flops = _conv_flops(x.numel if transposed else out.numel, w)
    extra = out.numel if _t(rec, "bias") is not None else 0
    note = "2*N*Cout*out_spatial*(Cin/groups)*prod(kernel)" + (" + bias add" if extra else "")
    if transposed:
        note = "transposed: 2*N*Cin*in_spatial*(Cout/groups)*prod(kernel)" + (" + bias add" if extra else "")
    return _gemm(rec, p, flops, [x, w], note, extra, conv=True)


def _rule_convolution_backward(rec: OpRecord, p: Precision) -> OpCount:
    g, x, w = _t(rec, "grad_output"), _t(rec, "input"), _t(rec, "weight")
    transposed = bool(rec.args.get("transposed"))
    mask = list(rec.args.get("output_mask") or (True, True, True))
    one = _conv_flops(x.numel if transposed else g.numel, w)
    flops = one * (int(bool(mask[0])) + int(bool(mask[1])))
    extra = g.numel if len(mask) > 2 and mask[2] else 0
    note = "grad_input and grad_weight each as the forward; grad_bias 1 per grad_output element"
    return _gemm(rec, p, flops, [x, w, g], note, extra, conv=True)


# ----------------------------------------------------------------------------------------------
# Attention

_BSHD_OPS = {
    "_flash_attention_forward",
    "_flash_attention_backward",
    "_efficient_attention_forward",
    "_efficient_attention_backward",
}


def _rule_attention(rec: OpRecord, p: Precision) -> OpCount:
    q, k, v = _t(rec, "query"), _t(rec, "key"), _t(rec, "value")
    op = rec.qualified_name
    if q is None or k is None or v is None:
        return OpCount(op, {}, _bytes_default(rec), False, "attention without query/key/value tensors")
    name = rec.name
    if name in _BSHD_OPS:
        if q.dim != 4:
            return OpCount(
                op, {}, _bytes_default(rec), False, "variable-length attention: FLOPs depend on sequence lengths"
            )
        batch, sq, sk, d, dv = q.shape[0] * q.shape[2], q.shape[1], k.shape[1], q.shape[-1], v.shape[-1]
    else:
        batch = 1
        for s in q.shape[:-2]:
            batch *= s
        sq, sk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    causal = bool(rec.args.get("is_causal")) or rec.args.get("custom_mask_type") in (1, 2)
    fwd = 2 * batch * sq * sk * (d + dv)
    note = f"4*B*H*Sq*Sk*D with B*H={batch} Sq={sq} Sk={sk} D={d}" + (f" Dv={dv}" if dv != d else "")
    if causal:
        fwd //= 2
        note += "; causal: halved (half the score matrix is masked)"
    backward = name.endswith("_backward")
    flops = 5 * fwd // 2 if backward else fwd
    if backward:
        note += "; backward = 2.5 x forward (QK^T recompute, dV, dP, dQ, dK)"
    if tensor_unit(q.dtype, p.matmul_tf32) is None:
        return OpCount(op, {}, _bytes_default(rec), False, f"no tensor unit for {q.dtype} attention")
    return _gemm(rec, p, flops, [q, k, v], note)


# ----------------------------------------------------------------------------------------------
# Norms and losses (constants in the YAML)


def _rule_norm(rec: OpRecord, p: Precision) -> OpCount:
    c = rule_table()["norms"][rec.name]
    x = _t(rec, "input")
    n = x.numel if x is not None else max(t.numel for t in rec.inputs)
    weight, bias = _t(rec, "weight"), _t(rec, "bias")
    if rec.name.endswith("_backward"):
        mask = list(rec.args.get("output_mask") or (True, True, True))
        per = c["flops"] * bool(mask[0])
        if weight is not None and len(mask) > 1 and mask[1]:
            per += c.get("grad_weight", 0)
        if len(mask) > 2 and mask[2] and c.get("grad_bias"):
            per += c["grad_bias"]
    else:
        per = c["flops"]
        if rec.name == "native_batch_norm" and rec.args.get("training") is False:
            per = rule_table()["norms"]["_native_batch_norm_legit_no_training"]["flops"]
        per += c.get("per_affine", 0) * ((weight is not None) + (bias is not None))
    return OpCount(rec.qualified_name, _vector(rec, per, n), _bytes_default(rec), True, c.get("note", ""))


def _rule_nll(rec: OpRecord, p: Precision) -> OpCount:
    c = rule_table()["nll"][rec.name]
    target, x, weight = _t(rec, "target"), _t(rec, "self"), _t(rec, "weight")
    n = target.numel
    per = c["flops"] + (c.get("per_weight", 0) if weight is not None else 0)
    others = [t for t in _others(rec)]  # the input is read only at the target positions
    read = sum(t.footprint_bytes for t in others if t != weight) + (n * weight.itemsize if weight is not None else 0)
    if rec.name.endswith("_forward"):
        read += n * x.itemsize
    written = sum(t.footprint_bytes for t in rec.outputs)
    return OpCount(rec.qualified_name, _vector(rec, per, n), read + written, True, c.get("note", ""))


# ----------------------------------------------------------------------------------------------
# Pooling


def _window(rec: OpRecord) -> int:
    k = rec.args.get("kernel_size") or []
    n = 1
    for s in k if isinstance(k, (list, tuple)) else [k]:
        n *= int(s)
    dims = rec.name.rstrip("_").split("pool")[-1][:1]  # "max_pool2d..." -> "2"
    if isinstance(k, int) and dims.isdigit():
        n = int(k) ** int(dims)
    return n


def _rule_pool(rec: OpRecord, p: Precision) -> OpCount:
    """Max pooling: one comparison per window element per output; average: one add each (+1 divide).

    Backward: max scatters one value per grad_output element; average spreads each grad_output over its
    window (one add per window element).
    """
    window = _window(rec)
    backward = "backward" in rec.name
    grad = _t(rec, "grad_output")
    n = grad.numel if backward and grad is not None else max((t.numel for t in rec.outputs), default=0)
    per = (1 if backward else window) if rec.name.startswith("max") else window + (0 if backward else 1)
    note = f"window {window}: " + ("1 per grad_output element" if per == 1 else f"{per} per output element")
    return OpCount(rec.qualified_name, _vector(rec, per, n), _bytes_default(rec), True, note)


# ----------------------------------------------------------------------------------------------
# Multi-tensor ops and fused optimizers


def _list(rec: OpRecord, name: str) -> list[TensorMeta]:
    v = rec.args.get(name)
    return [t for t in v if isinstance(t, TensorMeta)] if isinstance(v, (list, tuple)) else []


def _rule_foreach(rec: OpRecord, p: Precision) -> OpCount:
    """``_foreach_<op>``: <op>'s per-element rule over every tensor of ``self``; bytes: every list read and written."""
    base = rec.base_name.removeprefix(rule_table()["foreach_prefix"])
    rule = rule_table()["ops"].get(base)
    if rule is None:
        return OpCount(rec.qualified_name, {}, _bytes_default(rec), False, f"no FLOP rule for {base}")
    per = int(rule.get("flops", 0)) if rule["kind"] in ("elementwise", "reduction") else 0
    selves = _list(rec, "self")
    nbytes = _bytes_default(rec)
    if per == 0 and rec.name.endswith("_"):  # an in-place copy or fill overwrites self without reading it
        nbytes -= sum(t.footprint_bytes for t in selves)
    note = f"{base} over {len(selves)} tensors" + (f": {rule['note']}" if rule.get("note") else "")
    return OpCount(rec.qualified_name, _vector(rec, per, sum(t.numel for t in selves)), nbytes, True, note)


def _rule_fused_optimizer(rec: OpRecord, p: Precision) -> OpCount:
    """A fused Adam/AdamW step: per-element FLOPs from the table; the state it reads and writes (see the table)."""
    c = rule_table()["optimizers"][rec.name]
    amsgrad = bool(rec.args.get("amsgrad"))
    per = c["flops"] + (c["weight_decay"] if rec.args.get("weight_decay") else 0) + (c["amsgrad"] if amsgrad else 0)
    params = _list(rec, "self")
    state = ["self", "exp_avgs", "exp_avg_sqs"] + (["max_exp_avg_sqs"] if amsgrad else [])
    read = sum(t.footprint_bytes for name in [*state, "grads", "state_steps"] for t in _list(rec, name))
    written = sum(t.footprint_bytes for name in state for t in _list(rec, name))
    n = sum(t.numel for t in params)
    return OpCount(rec.qualified_name, {"fp32_vector": per * n} if n else {}, read + written, True, c["note"])


# ----------------------------------------------------------------------------------------------
# Dispatch

Rule = Callable[[OpRecord, Precision], OpCount]
_CODE_RULES: dict[str, Rule] = {
    "mm": _rule_mm,
    "_scaled_mm": _rule_mm,
    "_int_mm": _rule_mm,
    "addmm": _rule_addmm,
    "_addmm_activation": _rule_addmm,
    "bmm": _rule_bmm,
    "baddbmm": _rule_baddbmm,
    "addbmm": _rule_baddbmm,
    "_grouped_mm": _rule_grouped_mm,
    "_scaled_grouped_mm": _rule_grouped_mm,
    "mv": _rule_mv,
    "addmv": _rule_mv,
    "addr": _rule_addr,
    "convolution": _rule_convolution,
    "_convolution": _rule_convolution,
    "convolution_backward": _rule_convolution_backward,
}
for _dims in ("1d", "2d", "3d"):
    for _name in (f"max_pool{_dims}_with_indices", f"avg_pool{_dims}", f"max_pool{_dims}"):
        _CODE_RULES[_name] = _rule_pool
        _CODE_RULES[f"{_name}_backward"] = _rule_pool
_ATTENTION_OPS = (
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
    "_flash_attention_forward",
    "_efficient_attention_forward",
)
for _name in _ATTENTION_OPS:
    _CODE_RULES[_name] = _rule_attention
    _CODE_RULES[_name.removesuffix("_forward") + "_backward"] = _rule_attention


def _rules_for(name: str) -> Rule | dict[str, Any] | None:
    if name in _CODE_RULES:
        return _CODE_RULES[name]
    table = rule_table()
    if name in table["norms"]:
        return _rule_norm
    if name in table["nll"]:
        return _rule_nll
    if name in table["optimizers"]:
        return _rule_fused_optimizer
    if name.startswith(table["foreach_prefix"]):
        return _rule_foreach
    return table["ops"].get(name)


def _policy(allow_tf32: bool | None, precision: Precision | None) -> Precision:
    if precision is not None:
        return precision
    return Precision.current(matmul_tf32=allow_tf32)


def count_op(rec: OpRecord, allow_tf32: bool | None = None, precision: Precision | None = None) -> OpCount:
    """FLOPs by unit and bytes of one recorded op (``counted=False`` when no rule knows it).

    ``precision`` (default: the ``fastest`` basis with PyTorch's TF32 switches, ``allow_tf32`` overriding
    the matmul one) decides the unit of matrix work; see :mod:`solkit.sol.precision`.
    """
    p = _policy(allow_tf32, precision)
    if rec.is_view:
        return OpCount(rec.qualified_name, {}, 0, True, "view: moves nothing")
    rule = _rule_of(rec)
    if rule is None:
        return OpCount(rec.qualified_name, {}, _bytes_default(rec), False, "no FLOP rule for this op")
    if callable(rule):
        return rule(rec, p)
    return _table_rule(rec, rule)


def _rule_of(rec: OpRecord) -> Rule | dict[str, Any] | None:
    rule = _rules_for(rec.name)
    if rule is None and rec.base_name != rec.name:
        rule = _rules_for(rec.base_name)
    return rule


def value_preserving(rec: OpRecord) -> bool:
    """Whether an op only moves values (a view, cast, copy, concatenation or gather)."""
    if rec.is_view:
        return True
    rule = _rule_of(rec)
    return isinstance(rule, dict) and rule.get("kind") in ("view", "movement", "gather")


def count_ops(
    records: Iterable[OpRecord], allow_tf32: bool | None = None, precision: Precision | None = None
) -> list[OpCount]:
    """Count every record, after following each tensor's storage dtype through them (the precision policy)."""
    p = _policy(allow_tf32, precision)
    records = list(records)
    annotate_origins(records, value_preserving)
    return [count_op(r, precision=p) for r in records]
