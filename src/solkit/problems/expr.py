"""A small, safe evaluator for axis expressions and constraints.

Definitions may declare an axis as ``{"type": "expr", "expression": "num_heads * head_dim"}`` and
constraints such as ``"hidden_size % num_heads == 0"``. Those strings come from files, so they are
never handed to :func:`eval`: they are parsed with :mod:`ast` and walked here, allowing only

* integer and float literals, booleans, and names bound in ``variables``;
* ``+ - * / // % **`` and unary ``+ - not``;
* comparisons (``== != < <= > >=``, chained) and ``and`` / ``or``;
* ``min(...)``, ``max(...)``, ``abs(...)`` — the only calls.

Everything else (attributes, subscripts, lambdas, other calls, strings) raises :class:`ExprError`.
Exponents are bounded so a file cannot make the evaluator spin on ``10 ** 10 ** 10``.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping

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
_CALLS = {"min": min, "max": max, "abs": abs}
_MAX_EXPONENT = 128
_MAX_LENGTH = 1000

Number = int | float | bool


class ExprError(ValueError):
    """An expression that is malformed, unsafe, or refers to an unknown name."""


_ALLOWED_NODES = (
    ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call,
    ast.And, ast.Or, *_BINARY, *_UNARY, *_COMPARE,
)  # fmt: skip


def names_in(expression: str) -> set[str]:
    """The variable names an expression refers to (call names like ``min`` excluded).

    Also checks the expression's structure, so a file is rejected when loaded, not when evaluated.
    """
    tree = _parse(expression)
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ExprError(f"{type(node).__name__} is not allowed in an expression")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _CALLS):
            raise ExprError("only min(), max() and abs() may be called in an expression")
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}


def evaluate(expression: str, variables: Mapping[str, Number]) -> Number:
    """Evaluate ``expression`` with ``variables``; raises :class:`ExprError` on anything unsafe."""
    return _eval(_parse(expression).body, variables)


def evaluate_int(expression: str, variables: Mapping[str, Number]) -> int:
    """Evaluate an axis expression; the result must be a whole number (``8 / 2`` is fine, ``7 / 2`` is not)."""
    value = evaluate(expression, variables)
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


def _eval(node: ast.AST, env: Mapping[str, Number]) -> Number:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (bool, int, float)):
            return node.value
        raise ExprError(f"literal {node.value!r} is not a number")
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"unknown name {node.id!r}")
        value = env[node.id]
        if not isinstance(value, (bool, int, float)):
            raise ExprError(f"name {node.id!r} is not a number")
        return value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ExprError(f"exponent {right} too large")
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExprError("division by zero") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand, env))
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, env) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comparator in zip(node.ops, node.comparators):
            if type(op) not in _COMPARE:
                raise ExprError(f"comparison {type(op).__name__} not allowed")
            right = _eval(comparator, env)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS and not node.keywords:
        return _CALLS[node.func.id](*[_eval(a, env) for a in node.args])
    raise ExprError(f"{type(node).__name__} is not allowed in an expression")
