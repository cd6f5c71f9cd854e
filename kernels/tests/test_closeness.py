"""The one closeness rule (kernels.checking.compare): the harness's oracle and screen, kernels'
tests and the tuning scripts all judge an output by it. Before, the harness and kernels each
had a Closeness of their own, with different NaN/Inf rules; the cases where they differed are
here."""

from __future__ import annotations

import math

import torch

from kernels.checking import compare
from kernels.problem import Tolerance

TOL = Tolerance(rtol=1e-2, atol=1e-3)
INF, NAN = float("inf"), float("nan")


def test_it_measures_error_relative_to_magnitude():
    ref = torch.tensor([1000.0, 0.001])
    ok = compare(ref * (1 + 5e-3), ref, TOL)
    assert ok.passed and ok.worst_error < 1
    bad = compare(ref + torch.tensor([0.0, 0.01]), ref, TOL)
    assert not bad.passed and math.isclose(bad.worst_error, 0.01 / (1e-3 + 1e-5), rel_tol=1e-3)
    assert "at (1,)" in bad.detail


def test_a_nan_where_the_reference_is_finite_is_wrong_and_counted_as_unwritten():
    c = compare(torch.tensor([1.0, NAN, NAN]), torch.ones(3), TOL)
    assert not c.passed and c.unwritten == 2 and c.worst_error == INF
    # Also when the reference has an Inf elsewhere (kernels' old rule let this NaN through).
    c = compare(torch.tensor([INF, NAN]), torch.tensor([INF, 1.0]), TOL)
    assert not c.passed and c.unwritten == 1


def test_a_nan_in_the_reference_is_never_a_wildcard():
    ref = torch.tensor([1.0, NAN])
    c = compare(ref.clone(), ref, TOL)  # kernels' old rule passed NaN against NaN
    assert not c.passed and "reference has NaN" in c.detail


def test_an_inf_must_match_an_inf_of_the_same_sign():
    ref = torch.tensor([INF, -INF, 2.0])
    assert compare(ref.clone(), ref, TOL).passed  # the harness's old rule refused any Inf
    flipped = compare(torch.tensor([INF, INF, 2.0]), ref, TOL)  # kernels' old rule passed it
    assert not flipped.passed and flipped.worst_error == INF and "same sign" in flipped.detail
    assert not compare(torch.tensor([1e30, -INF, 2.0]), ref, TOL).passed
    assert not compare(torch.tensor([INF, -INF, INF]), ref, TOL).passed  # Inf for a finite
    assert not compare(torch.tensor([NAN, -INF, 2.0]), ref, TOL).passed


def test_a_shape_mismatch_and_an_empty_output():
    assert not compare(torch.ones(3), torch.ones(4), TOL).passed
    assert compare(torch.ones(0), torch.ones(0), TOL).passed
