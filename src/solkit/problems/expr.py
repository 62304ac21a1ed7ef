"""The one safe evaluator of expressions that come from files: axes, constraints, tuning spaces, CLI numbers.

Definitions declare axes as ``{"type": "expr", "expression": "num_heads * head_dim"}`` and constraints
such as ``"hidden_size % num_heads == 0"`` or ``"num_kv_indices == kv_indptr[-1].item()"``; a tuning space
declares ``"BLOCK_N >= 64 * num_warps"``; ``solkit sol --flops 2*M*N*K`` takes arithmetic. Those strings are
never handed to :func:`eval`: they are parsed with :mod:`ast` and walked here, allowing only

* number, boolean and string literals (strings only in comparisons), and names bound in ``variables``;
* ``+ - * / // % **`` and unary ``+ - not`` on numbers; comparisons (chained), ``and`` / ``or``;
* the calls ``min max abs len log2 ceil floor``;
* on a bound value that is not a number (a tensor input, a shape): an integer index ``x[-1]``, the
  attributes ``.shape`` / ``.ndim``, and the methods ``.item() .numel() .dim() .size()``. A one-element
  tensor met where a number is needed is read with ``.item()``.

Everything else (other attributes and calls, slices, lambdas, comprehensions) raises :class:`ExprError`.
Exponents are bounded so a file cannot make the evaluator spin on ``10 ** 10 ** 10``.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Not: operator.not_}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_CALLS = {"min": min, "max": max, "abs": abs, "len": len, "log2": math.log2, "ceil": math.ceil, "floor": math.floor}
_ATTRIBUTES = {"shape", "ndim"}
_METHODS = {"item", "numel", "dim", "size"}
_MAX_EXPONENT = 128
_MAX_LENGTH = 1000

Number = int | float | bool


class ExprError(ValueError):
    """An expression that is malformed, unsafe, or refers to an unknown name."""


_ALLOWED_NODES = (
    ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call,
    ast.Attribute, ast.Subscript, ast.And, ast.Or, *_BINARY, *_UNARY, *_COMPARE,
)  # fmt: skip


@lru_cache(maxsize=4096)
def _checked(expression: str) -> tuple[ast.Expression, frozenset[str]]:
    """The parsed tree of ``expression`` and the variable names it uses; structure checked once per string."""
    tree = _parse(expression)
    called: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ExprError(f"{type(node).__name__} is not allowed in an expression")
        if isinstance(node, ast.Call):
            _check_call(node)
            if isinstance(node.func, ast.Name):
                called.add(id(node.func))
        elif isinstance(node, ast.Attribute) and node.attr not in _ATTRIBUTES | _METHODS:
            raise ExprError(f"attribute .{node.attr} is not allowed; allowed: {sorted(_ATTRIBUTES | _METHODS)}")
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, (ast.Slice, ast.Tuple)):
            raise ExprError("only a single integer index is allowed (x[-1]), not a slice")
    names = frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called)
    return tree, names


def _check_call(node: ast.Call) -> None:
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise ExprError("calls take positional arguments only")
    func = node.func
    if isinstance(func, ast.Name) and func.id in _CALLS:
        return
    if isinstance(func, ast.Attribute) and func.attr in _METHODS:
        if func.attr != "size" and node.args or len(node.args) > 1:
            raise ExprError(f".{func.attr}() takes no arguments" if func.attr != "size" else ".size() takes one")
        return
    allowed = ", ".join(f"{n}()" for n in _CALLS) + ", " + ", ".join(f".{m}()" for m in sorted(_METHODS))
    raise ExprError(f"only {allowed} may be called in an expression")


def names_in(expression: str) -> set[str]:
    """The variable names an expression refers to (call names like ``min`` excluded).

    Also checks the expression's structure, so a file is rejected when loaded, not when evaluated.
    """
    return set(_checked(expression)[1])


def evaluate(expression: str, variables: Mapping[str, Any]) -> Any:
    """Evaluate ``expression`` with ``variables``; raises :class:`ExprError` on anything unsafe."""
    return _eval(_checked(expression)[0].body, variables)


def evaluate_int(expression: str, variables: Mapping[str, Any]) -> int:
    """Evaluate an axis expression; the result must be a whole number (``8 / 2`` is fine, ``7 / 2`` is not)."""
    value = _number(evaluate(expression, variables), expression)
    if isinstance(value, bool):
        raise ExprError(f"expression {expression!r} gives a boolean, not an axis size")
    if isinstance(value, float):
        if not value.is_integer():
            raise ExprError(f"expression {expression!r} gives {value}, not a whole number")
        value = int(value)
    return value


def _parse(expression: str) -> ast.Expression:
    if not isinstance(expression, str) or not expression.strip():
        raise ExprError("empty expression")
    if len(expression) > _MAX_LENGTH:
        raise ExprError(f"expression longer than {_MAX_LENGTH} characters")
    try:
        return ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse {expression!r}: {exc.msg}") from None


def _number(value: Any, what: str) -> Number:
    """``value`` as a Python number; a one-element tensor (or numpy scalar) is read with ``.item()``."""
    if isinstance(value, (bool, int, float)):
        return value
    item = getattr(value, "item", None)
    numel = getattr(value, "numel", None)
    if callable(item) and (not callable(numel) or numel() == 1):
        got = item()
        if isinstance(got, (bool, int, float)):
            return got
    raise ExprError(f"{what} is not a number")


def _scalar(value: Any, what: str) -> Number | str:
    return value if isinstance(value, str) else _number(value, what)


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    # Long on purpose: one branch per allowed node type, the whole grammar in one place.
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (bool, int, float, str)):
            return node.value
        raise ExprError(f"literal {node.value!r} is not a number")
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"unknown name {node.id!r}")
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left = _number(_eval(node.left, env), ast.unparse(node.left))
        right = _number(_eval(node.right, env), ast.unparse(node.right))
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ExprError(f"exponent {right} too large")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExprError("division by zero") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_number(_eval(node.operand, env), ast.unparse(node.operand)))
    if isinstance(node, ast.BoolOp):
        values = [bool(_scalar(_eval(v, env), ast.unparse(v))) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _scalar(_eval(node.left, env), ast.unparse(node.left))
        for op, comparator in zip(node.ops, node.comparators):
            if type(op) not in _COMPARE:
                raise ExprError(f"comparison {type(op).__name__} not allowed")
            right = _scalar(_eval(comparator, env), ast.unparse(comparator))
            if isinstance(left, str) != isinstance(right, str) and type(op) not in (ast.Eq, ast.NotEq):
                raise ExprError(f"cannot order a string and a number in {ast.unparse(node)!r}")
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        return _call(node, env)
    if isinstance(node, ast.Attribute) and node.attr in _ATTRIBUTES:
        value = _eval(node.value, env)
        if isinstance(value, (bool, int, float, str)) or not hasattr(value, node.attr):
            raise ExprError(f"{ast.unparse(node.value)} has no .{node.attr}")
        got = getattr(value, node.attr)
        return tuple(got) if node.attr == "shape" else got
    if isinstance(node, ast.Subscript):
        value = _eval(node.value, env)
        index = _number(_eval(node.slice, env), ast.unparse(node.slice))
        if isinstance(value, (bool, int, float, str)) or isinstance(index, (bool, float)):
            raise ExprError(f"{ast.unparse(node)}: only tensors and shapes can be indexed, by an integer")
        try:
            return value[index]
        except (IndexError, TypeError, RuntimeError) as exc:
            raise ExprError(f"{ast.unparse(node)}: {exc}") from None
    raise ExprError(f"{type(node).__name__} is not allowed in an expression")


def _call(node: ast.Call, env: Mapping[str, Any]) -> Any:
    func = node.func
    if isinstance(func, ast.Name) and func.id in _CALLS:
        args = [_eval(a, env) for a in node.args]
        if func.id != "len":
            args = [_number(a, ast.unparse(n)) for a, n in zip(args, node.args)]
        try:
            return _CALLS[func.id](*args)
        except (TypeError, ValueError) as exc:
            raise ExprError(f"{ast.unparse(node)}: {exc}") from None
    if isinstance(func, ast.Attribute) and func.attr in _METHODS:
        value = _eval(func.value, env)
        method = None if isinstance(value, (bool, int, float, str)) else getattr(value, func.attr, None)
        if not callable(method):
            raise ExprError(f"{ast.unparse(func.value)} has no .{func.attr}()")
        args = [_number(_eval(a, env), ast.unparse(a)) for a in node.args]
        try:
            got = method(*args)
        except (IndexError, TypeError, ValueError, RuntimeError) as exc:
            raise ExprError(f"{ast.unparse(node)}: {exc}") from None
        return tuple(got) if func.attr == "size" and not args else got
    raise ExprError(f"{ast.unparse(node)}: call not allowed")
