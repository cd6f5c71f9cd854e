"""The screen (tier one) on the CPU: it renders (family, point) itself, checks each render at
the tail and problem shapes against the reference, ranks the right ones by time interleaved
with the baseline, and a render that kills its process costs that render only."""

from __future__ import annotations

import inspect
import time

import pytest

from harness.results import Verdict
from harness.screen import Screener, ScreenPoint, screen, tail_shape
from harness.tests.conftest import needs_interpreter
from kernels import parse_problem

PROBLEM = parse_problem("rmsnorm", "32x256", "fp32")
REF = "harness.tests.screen_op:OP"


def point(kind: str, scale: int = 1) -> ScreenPoint:
    return ScreenPoint(f"screen_{kind}", {"SCALE": scale})


@needs_interpreter
def test_it_checks_and_ranks_renders_and_survives_one_that_kills_its_process():
    from harness.screen import ScreenConfig

    points = [
        point("right", 1),
        point("unwritten"),
        point("raises"),
        point("dies"),
        point("right", 2),
    ]
    points.append(ScreenPoint("screen_right", {"SCALE": 7}))  # not a point of the family
    result = screen(PROBLEM, points, deadline_s=240, config=ScreenConfig(op_ref=REF))

    by = {(e.family, e.params.get("SCALE")): e for e in result.entries}
    for scale in (1, 2):
        right = by[("screen_right", scale)]
        assert right.verdict is Verdict.PASSED and right.speedup and right.rounds == 1
        assert right.median_us and right.baseline_us and right.worst_error is not None
    assert by[("screen_unwritten", 1)].verdict is Verdict.INCORRECT
    assert "NaN" in by[("screen_unwritten", 1)].detail
    assert by[("screen_raises", 1)].verdict is Verdict.INCORRECT
    assert by[("screen_dies", 1)].verdict is Verdict.CRASH  # the batch went on without it
    assert by[("screen_right", 7)].verdict is Verdict.COMPILE_ERROR
    assert "invalid point" in by[("screen_right", 7)].detail
    assert [e.family for e in result.ranked()] == ["screen_right", "screen_right"]
    assert result.timed == 4 and result.gpu_s > 0 and result.regime.value == "interpreter"


def test_only_renders_of_an_ops_own_families_reach_it():
    # No entry point takes source text: an LLM's code cannot be screened, only verified.
    for fn in (screen, Screener.submit, Screener.screen):
        assert "source" not in inspect.signature(fn).parameters
    with pytest.raises(ValueError, match="no family"):
        from harness.screen import render

        render(PROBLEM, ScreenPoint("not_a_family", {}), REF)


@needs_interpreter
def test_a_candidate_that_hangs_costs_its_share_and_the_rest_are_screened():
    from harness.screen import ScreenConfig

    points = [point("right", 1), point("hangs"), point("right", 2)]
    config = ScreenConfig(op_ref=REF, point_s=8.0)
    started = time.monotonic()
    result = screen(PROBLEM, points, deadline_s=240, config=config)
    took = time.monotonic() - started
    by = {(e.family, e.params.get("SCALE")): e for e in result.entries}
    hung = by[("screen_hangs", 1)]
    assert hung.verdict is Verdict.TIMEOUT and "its share" in hung.detail, hung.detail
    for scale in (1, 2):
        assert by[("screen_right", scale)].verdict is Verdict.PASSED
    assert took < 120, f"the hang took the batch's budget ({took:.0f} s of 240)"


def test_a_screen_past_its_deadline_screens_nothing_and_says_so():
    result = screen(PROBLEM, [point("right")], deadline_s=1.0, config=_config())
    assert [e.verdict for e in result.entries] == [Verdict.TIMEOUT]
    assert result.gpu_s == 0.0


def test_the_tail_shape_keeps_the_compile_specialization_and_misses_every_tile():
    p = parse_problem("matmul", "4096x28672x1", "bf16", "NN")
    t = tail_shape(p)
    assert t.shape == (1040, 1040, 1)
    for s in t.shape[:2]:
        assert s % 16 == 0 and s % 32 != 0
    odd = tail_shape(parse_problem("matmul", "3000x17x4095", "bf16", "NN"))
    for a, b in zip(odd.shape, (3000, 17, 4095), strict=True):
        assert (a % 16 == 0) == (b % 16 == 0) and a <= b and a > 1


def _config():
    from harness.screen import ScreenConfig

    return ScreenConfig(op_ref=REF)
