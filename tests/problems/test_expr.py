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


@pytest.mark.parametrize(
    "expr,want",
    [
        ("num_kv_indices == kv_indptr[-1].item()", True),
        ("num_kv_indices == kv_indptr[-1]", True),  # a one-element tensor is read with .item()
        ("kv_indptr.shape[0] == n + 1", True),
        ("len(kv_indptr) == n + 1 and kv_indptr.numel() == kv_indptr.size(0)", True),
        ("kv_indptr[0].item() == 0 and kv_indptr.dim() == 1 and kv_indptr.ndim == 1", True),
        ("num_kv_indices == kv_indptr[1].item()", False),
    ],
)
def test_constraints_on_tensor_inputs(expr, want):
    torch = pytest.importorskip("torch")
    env = {"n": 3, "num_kv_indices": 7, "kv_indptr": torch.tensor([0, 2, 5, 7], dtype=torch.int32)}
    assert bool(evaluate(expr, env)) is want


@pytest.mark.parametrize(
    "expr,match",
    [
        ("x.sum() > 0", "may be called"),
        ("x.item.__self__", "attribute .__self__"),
        ("x[0:2].item() == 1", "slice"),
        ("x.item() == 1", "cannot be converted"),  # item() of a 3-element tensor
        ("x[7].item() == 1", "out of bounds"),
        ("n.item()", "has no .item"),
        ("x.numel(1)", "no arguments"),
        ("getattr(x, 'shape')", "may be called"),
        ("x.shape[0] < 'a'", "cannot order"),
    ],
)
def test_tensor_expressions_stay_safe(expr, match):
    torch = pytest.importorskip("torch")
    with pytest.raises(ExprError, match=match):
        evaluate(expr, {"x": torch.arange(3), "n": 2})


def test_names_in_tensor_constraint():
    assert names_in("num_kv_indices == kv_indptr[-1].item()") == {"num_kv_indices", "kv_indptr"}


def test_strings_compare_only_for_equality():
    assert evaluate("MODE == 'fast' and K >= 2", {"MODE": "fast", "K": 4}) is True
    with pytest.raises(ExprError):
        evaluate("MODE * 2", {"MODE": "fast"})
