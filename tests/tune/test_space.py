import pytest

from solkit.errors import SolkitError
from solkit.tune.space import Space, config_key, gemm_smem_bytes, smem_limit


def gemm_like(limit=232448):
    return Space(
        {"BLOCK_M": [32, 64, 128, 256], "BLOCK_N": [32, 64, 128, 256], "BLOCK_K": [32, 64, 128],
         "num_warps": [4, 8], "num_stages": [2, 3, 4, 5]},
        ["BLOCK_M * BLOCK_N <= 128 * 256"],
        smem_bytes=gemm_smem_bytes(2),
        smem_limit_bytes=limit,
    )  # fmt: skip


def test_constraints_and_prefilter_remove_configs():
    s = gemm_like()
    assert len(s.product()) == 384
    assert all(c["BLOCK_M"] * c["BLOCK_N"] <= 128 * 256 for c in s.configs)
    assert all((c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * c["num_stages"] * 2 <= 232448 for c in s.configs)
    assert len(s.configs) < len(s.candidates()) < 384  # the pre-filter removes more than the constraints
    big = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "num_warps": 8, "num_stages": 5}
    assert "shared memory" in s.check(big)
    assert s.check(big, prefilter=False) is None


def test_smem_slack_loosens_the_filter():
    strict, loose = gemm_like(), gemm_like()
    loose.smem_slack = 1.3
    assert len(loose.candidates()) == len(strict.candidates())
    assert len(Space(loose.params, ["BLOCK_M * BLOCK_N <= 128 * 256"], smem_bytes=gemm_smem_bytes(),
                     smem_limit_bytes=232448, smem_slack=1.3).configs) > len(strict.configs)  # fmt: skip


@pytest.mark.parametrize("radius", [1, 2])
def test_neighbors_differ_in_one_parameter(radius):
    s = gemm_like()
    c = s.configs[len(s.configs) // 2]
    nbrs = s.neighbors(c, radius)
    assert nbrs
    for n in nbrs:
        diff = [k for k in s.names if n[k] != c[k]]
        assert len(diff) == 1
        k = diff[0]
        assert 0 < abs(s.params[k].index(n[k]) - s.params[k].index(c[k])) <= radius
        assert n in s


def test_expression_constraints_are_sandboxed():
    with pytest.raises(SolkitError, match="may be called"):
        Space({"A": [1, 2]}, ["__import__('os') or A"])
    with pytest.raises(SolkitError, match="unknown name 'B'"):
        Space({"A": [1, 2]}, ["B or A"])
    assert len(Space({"A": [1, 2, 4, 8]}, ["log2(A) >= ceil(1.5)"])) == 2
    with pytest.raises(SolkitError, match="only arithmetic"):
        Space({"A": [1, 2]}, ["A.__class__"])
    with pytest.raises(SolkitError, match="not valid Python"):
        Space({"A": [1, 2]}, ["A >"])


def test_bad_space_definitions_raise_one_line_errors():
    with pytest.raises(SolkitError, match="no values"):
        Space({"A": []})
    with pytest.raises(SolkitError, match="duplicate"):
        Space({"A": [1, 1]})
    with pytest.raises(SolkitError, match="params"):
        Space.from_dict({"nope": 1})
    with pytest.raises(SolkitError, match="unknown SOLKIT_TUNE_SPACE keys"):
        Space.from_dict({"params": {"A": [1]}, "extra": 1})
    with pytest.raises(SolkitError, match="unknown arch"):
        smem_limit("sm_1")


def test_dict_round_trip_and_list_mode():
    s = Space.from_dict(
        {"params": {"BLOCK": [16, 32, 64], "num_warps": [2, 4]}, "constraints": ["BLOCK >= 16 * num_warps"]}
    )
    again = Space.from_dict(s.to_dict())
    assert [config_key(c) for c in again.configs] == [config_key(c) for c in s.configs]
    assert again.digest == s.digest
    listed = Space.from_configs([{"BLOCK": 32, "num_warps": 2}, {"BLOCK": 64, "num_warps": 4}])
    assert len(listed) == 2
    assert {"BLOCK": 32, "num_warps": 4} not in listed
    assert smem_limit("sm_90") == 232448
