"""Screen our own kernel families on a model's problems: the cheap tier for a model job.

screen_problems(problems) renders each problem's starting points (kernels' Op.starting_points,
else each family's default), and one sandboxed child (phase `model_screen`, child.screen) runs
each point on the problem's own inputs: checked against the op's reference, then timed
interleaved with the op's PyTorch baseline (kf-timing-v2). The fastest correct point is gated
on the op's whole sweep (odd sizes, a decode row) and its adversarial inputs. Only renders of
our families are screened this way (trusted code, ARCHITECTURE.md "Two tiers"); what the
model finally runs is decided by the end-to-end check, which times the model every way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import kernels
from harness.config import Limits
from harness.model.sandbox import MODEL_LIMITS, child_env, default_device
from kernels.problem import Problem

POINTS_PER_PROBLEM = 6


@dataclass
class Screened:
    key: str
    problem: dict
    family: str | None = None
    params: dict | None = None
    source: str = ""
    speedup: float | None = None  # PyTorch baseline median / kernel median (None: none passed)
    kernel_us: float | None = None
    torch_us: float | None = None
    gate: list[str] = field(default_factory=list)  # the best point's failures on the sweep
    tried: list[dict] = field(default_factory=list)
    error: str = ""

    @property
    def won(self) -> bool:
        return bool(self.source) and not self.gate and (self.speedup or 0.0) > 1.0

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "source"} | {
            "won": self.won,
            "source_chars": len(self.source),
        }


def points(problem: Problem, limit: int = POINTS_PER_PROBLEM) -> list[dict]:
    """Up to `limit` valid, distinct (family, full params) points, starting points first.

    Triton families only: a CUDA C++ or CUTLASS configuration is one nvcc build of a minute or
    more, and the CUTLASS leaders of a large matmul (its first six starting points) would
    overrun this one child's wall clock; the agent's screen builds those, each in its own child.
    """
    op = kernels.get_op(problem.op)
    families = {f.name: f for f in op.families_for(problem) if f.backend == "triton"}
    partials = list(op.starting_points(problem)) + [(name, {}) for name in families]
    out: list[dict] = []
    for name, partial in partials:
        family = families.get(name) if name else next(iter(families.values()), None)
        if family is None:
            continue
        params = {**family.default(problem), **partial}
        point = {"family": family.name, "params": params}
        if family.check(problem, params) is None and point not in out:
            out.append(point)
        if len(out) >= limit:
            break
    return out


def screen_problems(
    problems: list[Problem],
    *,
    device: str | None = None,
    limit: int = POINTS_PER_PROBLEM,
    limits: Limits = MODEL_LIMITS,
    seed: int = 0,
) -> list[Screened]:
    from harness.sandbox import ChildStatus, run_child

    device = device or default_device()
    job = {
        "device": device,
        "seed": seed,
        "problems": [{"problem": p.to_dict(), "points": points(p, limit)} for p in problems],
    }
    child = run_child(
        "model_screen", job, "", limits=limits, cuda=device == "cuda", env_extra=child_env(device)
    )
    if child.status is not ChildStatus.OK or not child.result.get("ok"):
        why = child.error or child.result.get("error", "") or child.output[-1500:]
        return [Screened(p.key, p.to_dict(), error=f"screening failed: {why}") for p in problems]
    return [Screened(**r) for r in child.result["problems"]]
