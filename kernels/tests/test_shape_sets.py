"""The named shape sets: the unseen set stays disjoint from the public one it must generalize to."""

import pytest

from kernels.shapes import MATMUL, SET_NAMES, problem_set


def test_unseen_set_shares_no_shape_with_the_public_set():
    public = {entry.problem.shape for entry in MATMUL}
    unseen = problem_set("unseen")
    assert len(unseen) >= 20
    assert not [e.name for e in unseen if e.problem.shape in public]


def test_unseen_set_covers_the_shape_classes_it_is_for():
    shapes = [e.problem.shape for e in problem_set("unseen")]
    assert any(m == 1 for m, _, _ in shapes)  # decode, one token
    assert sum(m <= 32 and k * n * 2 >= 32 * 2**20 for m, n, k in shapes) >= 5  # weight streaming
    assert any(k >= 4 * max(m, n) for m, n, k in shapes)  # deep K
    assert any(n % 8 for _, n, _ in shapes)  # B rows not 16-byte aligned


def test_every_set_name_resolves_and_names_are_unique():
    for name in SET_NAMES:
        entries = problem_set(name)
        assert len({e.name for e in entries}) == len(entries)
    with pytest.raises(ValueError, match="unknown problem set"):
        problem_set("nope")
