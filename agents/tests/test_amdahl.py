"""The Amdahl plan: model speedups from shares, order, and the budget split by expected gain."""

from __future__ import annotations

import math

import pytest

from agents.amdahl import end_to_end, gain, make_plan, predicted_from_measured


def _group(label, share, optimizable=True):
    op = label.split("/")[0]
    return {
        "op": op,
        "label": label,
        "problem": {"op": op, "shape": [1], "dtype": "bf16", "layout": ""} if optimizable else None,
        "share": share,
        "time_us": share * 1000,
        "calls": 1.0,
    }


def test_it_computes_amdahls_law():
    assert end_to_end([(0.5, 2.0)]) == pytest.approx(1 / 0.75)
    assert end_to_end([(0.6, 3.0), (0.2, 2.0)]) == pytest.approx(1 / (0.2 + 0.2 + 0.1))
    assert end_to_end([]) == 1.0
    assert end_to_end([(1.0, 4.0)]) == pytest.approx(4.0)
    assert gain(0.5, 2.0) == pytest.approx(0.25)


def test_it_refuses_shares_over_one():
    with pytest.raises(ValueError):
        end_to_end([(0.7, 2.0), (0.4, 2.0)])


def test_it_orders_the_plan_by_share_and_predicts_each_speedup():
    groups = [_group("rmsnorm/a", 0.1), _group("matmul/b", 0.6), _group("attention", 0.3, False)]
    plan = make_plan(groups, budget_s=600, min_budget_s=10)
    assert [i.key for i in plan.items] == ["matmul/b", "rmsnorm/a"]
    top = plan.items[0]
    assert top.predicted["2x"] == pytest.approx(1 / (0.4 + 0.3))
    assert top.predicted["1.5x"] < top.predicted["2x"] < top.predicted["3x"] < top.ceiling
    assert top.ceiling == pytest.approx(2.5)
    assert plan.not_optimizable_share == pytest.approx(0.3)


def test_it_splits_the_budget_by_expected_gain():
    plan = make_plan(
        [_group("matmul/b", 0.6), _group("rmsnorm/a", 0.2)], budget_s=400, min_budget_s=10
    )
    a, b = plan.items
    assert a.budget_s + b.budget_s == pytest.approx(400, abs=0.2)
    assert a.budget_s / b.budget_s == pytest.approx(gain(0.6) / gain(0.2), rel=1e-2)


def test_it_drops_problems_whose_slice_would_be_too_small():
    groups = [_group("matmul/b", 0.7), _group("rmsnorm/a", 0.01)]
    plan = make_plan(groups, budget_s=300, min_budget_s=60)
    assert [i.key for i in plan.funded] == ["matmul/b"]
    assert plan.funded[0].budget_s == 300
    assert plan.items[1].budget_s == 0


def test_it_caps_the_number_of_problems():
    groups = [_group(f"matmul/{i}", 0.2) for i in range(4)]
    plan = make_plan(groups, budget_s=1000, max_problems=2, min_budget_s=1)
    assert len(plan.funded) == 2 and len(plan.items) == 4


def test_it_predicts_the_model_speedup_from_measured_kernels():
    plan = make_plan(
        [_group("matmul/b", 0.6), _group("rmsnorm/a", 0.2)], budget_s=100, min_budget_s=1
    )
    assert predicted_from_measured(plan, {}) == 1.0
    assert predicted_from_measured(plan, {"rmsnorm/a": 4.0}) == pytest.approx(1 / (0.8 + 0.05))
    assert plan.predicted_all["2x"] == pytest.approx(1 / (0.2 + 0.4))
    assert not math.isinf(plan.items[0].ceiling)
