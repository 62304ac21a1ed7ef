import pytest

from solkit.problems.expr import ExprError, evaluate, evaluate_int, names_in


@pytest.mark.parametrize(
    "expr,env,want",
    [
        ("head_dim // 2", {"head_dim": 128}, 64),
        ("a * b + 3", {"a": 7, "b": 5}, 38),
        ("n / 2", {"n": 8}, 4),
        ("2 ** k", {"k": 10}, 1024),
        ("-(a - b) % 7", {"a": 3, "b": 10}, 0),
        ("max(a, b) - min(a, b)", {"a": 3, "b": 11}, 8),
    ],
)
def test_axis_expressions(expr, env, want):
    assert evaluate_int(expr, env) == want


@pytest.mark.parametrize(
    "expr,env,want",
    [
        ("h % heads == 0", {"h": 4096, "heads": 32}, True),
        ("h % heads == 0", {"h": 4095, "heads": 32}, False),
        ("1 <= a < 10 and not b", {"a": 3, "b": False}, True),
        ("a > 5 or b", {"a": 1, "b": 0}, False),
    ],
)
def test_constraints(expr, env, want):
    assert bool(evaluate(expr, env)) is want


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os').system('true')",
        "a.__class__",
        "a[0]",
        "lambda: 1",
        "'x' * 3",
        "2 ** 10 ** 10",
        "n / 0",
        "unknown + 1",
        "open('f')",
        "[i for i in range(3)]",
    ],
)
def test_unsafe_or_bad_expressions_rejected(expr):
    with pytest.raises(ExprError):
        evaluate(expr, {"a": 1, "n": 2})


def test_non_integral_axis_rejected():
    with pytest.raises(ExprError, match="whole number"):
        evaluate_int("n / 2", {"n": 7})


def test_names_in_excludes_calls():
    assert names_in("max(a, b) * c") == {"a", "b", "c"}
