"""Which sources the judge may run in its own process: byte-identical renders of our families.

A Candidate may claim to be a render (family + parameters). The claim is checked, never
believed: the family must be one of the problem's op, the point valid for it, and rendering
it here must give exactly the candidate's source. A render is our own code (a template and a
point), as trusted as a baseline; anything else, an LLM's module or a render anyone edited,
is untrusted and only ever runs in its sandbox (harness/child/).
"""

from __future__ import annotations

from typing import Any

from harness.results import Candidate
from kernels.problem import Problem


def trusted_point(
    candidate: Candidate, problem: Problem, op_ref: str = ""
) -> dict[str, Any] | None:
    """{"family", "params"} when the source is that point's render for `problem`, else None."""
    if not candidate.family:
        return None
    point = {"family": candidate.family, "params": dict(candidate.params)}
    return point if render(problem, point, op_ref) == candidate.source else None


def render(problem: Problem, point: dict[str, Any], op_ref: str = "") -> str | None:
    """The point's source, or None when it names no valid point of the problem's op."""
    from harness.screen import ScreenPoint
    from harness.screen import render as render_point

    try:
        _, source = render_point(problem, ScreenPoint(point["family"], point["params"]), op_ref)
    except (ValueError, KeyError, TypeError):
        return None
    return source
