"""Operators ranked by median time lost over several profiled steps, ties from the measured spread, and when two
runs' top-k lists are stable."""

from __future__ import annotations

import pytest

from solkit.model.attribute import OpEvent
from solkit.model.ranking import Spread, cut_ties, rank, top_stability
from solkit.model.report import add_steps, build_report
from solkit.sol.ceilings import spec_ceilings

H200 = spec_ceilings("h200-sxm")


def _ranking(spreads: dict[str, tuple[float, float, float]]) -> list[dict]:
    return rank([(n, Spread(*v)) for n, v in spreads.items()])


@pytest.mark.parametrize(
    "spreads,labels",
    [
        ({"a": (5, 4, 6), "b": (3, 2.9, 3.1), "c": (1, 1, 1)}, ["1", "2", "3"]),  # no overlap: strict ranks
        ({"a": (5, 4, 6), "b": (3, 2.5, 3.5), "c": (2.8, 2.7, 3.2), "d": (1, 1, 1)}, ["1", "2=", "2=", "4"]),
        ({"a": (3, 2, 4), "b": (2.5, 1.5, 3.5), "c": (1.2, 1, 1.6)}, ["1=", "1=", "1="]),  # chained: a~b, b~c
        ({"x": (2, 2, 2), "w": (2, 2, 2)}, ["1=", "1="]),  # equal medians: ordered by name, tied
    ],
)
def test_rank_orders_by_median_and_labels_overlapping_spreads_as_ties(spreads, labels):
    r = _ranking(spreads)
    assert [x["lost_ms_median"] for x in r] == sorted((v[0] for v in spreads.values()), reverse=True)
    assert [x["rank_label"] for x in r] == labels
    assert [x["place"] for x in r] == list(range(1, len(spreads) + 1))


def test_cut_ties_are_the_members_the_spread_cannot_place():
    r = _ranking({"a": (9, 8, 10), "b": (5, 4.8, 5.5), "c": (4.5, 4.0, 4.9), "d": (1, 0.9, 1.1)})
    assert cut_ties(r, k=2) == {"b", "c"}  # b (inside) and c (outside) overlap across the cut
    assert cut_ties(r, k=1) == set() and cut_ties(r, k=3) == set()


# a run's top-3 against another's: (spreads of run A, spreads of run B, stable?)
BASE = {"sdpa": (6.5, 6.2, 6.7), "head": (2.4, 2.3, 2.5), "mlp": (2.2, 2.1, 2.3), "loss": (2.0, 1.95, 2.25),
        "norm": (0.5, 0.4, 0.6)}  # fmt: skip


@pytest.mark.parametrize(
    "a,b,stable,why",
    [
        (BASE, BASE, True, "identical"),
        # mlp and loss swap places 3/4, and in each run their spreads overlap across the cut
        (BASE, {**BASE, "mlp": (2.05, 2.0, 2.3), "loss": (2.1, 2.0, 2.2)}, True, "swapped, tied in both"),
        # the same swap where run B measured them far apart: B is sure, A is not; not the same list up to ties
        (BASE, {**BASE, "mlp": (1.5, 1.45, 1.55), "loss": (2.1, 2.05, 2.15)}, False, "swapped, tied in A only"),
        # head and mlp swap order inside the top-3: tied in both runs (overlapping spreads)
        ({**BASE, "head": (2.3, 2.2, 2.4)}, {**BASE, "head": (2.15, 2.05, 2.35)}, True, "reordered, tied"),
        # sdpa drops below head: their spreads are far apart in both runs
        (BASE, {**BASE, "sdpa": (2.3, 2.25, 2.35), "head": (6.5, 6.2, 6.7)}, False, "reordered, not tied"),
        # run B never measured mlp: it cannot be tied there
        (BASE, {k: v for k, v in BASE.items() if k != "mlp"}, False, "missing in B"),
    ],
)
def test_top_stability_is_equality_up_to_measured_ties(a, b, stable, why):
    res = top_stability(_ranking(a), _ranking(b), k=3)
    assert res["stable"] is stable, (why, res)
    assert res["same_order"] == (res["top_a"] == res["top_b"])
    if not stable:
        assert res["swapped_not_tied"] or res["reordered_not_tied"]


def _row(op, time_s, nbytes, **kw):
    return OpEvent(op=op, kind="aten", time_s=time_s, bytes=nbytes, counted=True, match="shapes", **kw)


@pytest.mark.parametrize("times", [(3.0, 1.0, 2.0), (2.0, 2.0, 2.0, 9.0, 1.0)])
def test_each_operator_is_ranked_by_its_median_over_the_steps(times):
    t_sol = 1e9 / H200.bandwidth  # 1 GB: `add` reads and writes it, `mul` the same
    steps = [[_row("add", t * t_sol, 1e9), _row("mul", 2.1 * t_sol, 1e9)] for t in times]
    mid = sorted(range(len(times)), key=lambda i: times[i])[(len(times) - 1) // 2]
    rep = build_report(steps[mid], measured_s=(times[mid] + 2.1) * t_sol, ceilings=H200, meta={})
    add_steps(rep, steps)
    d = rep.to_dict()
    add = next(o for o in d["ops"] if o["name"].startswith("add"))
    lost = sorted((t - 1) * t_sol * 1e3 for t in times)
    assert add["lost_ms_median"] == pytest.approx(lost[(len(lost) - 1) // 2])
    assert (add["lost_ms_min"], add["lost_ms_max"]) == pytest.approx((lost[0], lost[-1]))
    assert d["summary"]["steps_profiled"] == len(times)
    assert d["summary"]["ranking"][0]["name"].startswith("mul" if lost[(len(lost) - 1) // 2] < 1.1 * t_sol * 1e3
                                                          else "add")  # fmt: skip
    # mul lost 1.1 x T_SOL in every step: a zero-width spread, tied with add where add's range covers it
    mul = next(o for o in d["ops"] if o["name"].startswith("mul"))
    assert mul["lost_ms_min"] == pytest.approx(mul["lost_ms_max"])
    assert (add["tie_group"] == mul["tie_group"]) == (lost[0] <= mul["lost_ms_median"] <= lost[-1])


@pytest.mark.parametrize("b,stable", [(BASE, True), ({**BASE, "mlp": (1.5, 1.45, 1.55)}, False)])
def test_model_compare_reads_two_results_and_says_whether_stable(tmp_path, capsys, b, stable):
    import json

    from solkit.cli import main

    for name, spreads in (("a", BASE), ("b", b)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({"summary": {"ranking": _ranking(spreads)}}))
    assert main(["model-compare", str(tmp_path / "a"), str(tmp_path / "b"), "--top", "3", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["stable"] is stable and got["k"] == 3
    assert main(["model-compare", str(tmp_path / "a"), str(tmp_path / "b"), "--top", "3"]) == 0
    assert ("NOT STABLE" in capsys.readouterr().out) is not stable
    (tmp_path / "b" / "results.json").write_text(json.dumps({"summary": {}}))
    assert main(["model-compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2
    assert "summary.ranking" in capsys.readouterr().err
