"""Never ship a loss: whether our kernel for a shape is exported, and what the user gets.

A kernel wins a shape only if it passed every correctness stage at that shape and beats every
baseline timed beside it beyond noise: the product's one rule, harness/judge/wins.py (the bootstrap
95 % interval of baseline time / our time lies above 1 for each baseline). Otherwise
the shape falls back to PyTorch, which is 1.00x by definition. So each shape has two numbers:

  ours      our best verified kernel against the reference (torch.matmul), may be below 1;
            None when no candidate passed the gate;
  exported  what the product ships: `ours` if it won, else the fallback's 1.00x.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from harness.judge import wins

REFERENCE = "torch"  # what the fallback runs, and what speedups are quoted against
FALLBACK = 1.0


@dataclass(frozen=True)
class Verdict:
    won: bool
    reason: str  # "won", "failed gate", "no correct candidate", "not faster than <baseline>"
    best_baseline: str | None = None
    ours_vs_best: float | None = None
    ci_vs_best: tuple[float, float] | None = None  # bootstrap 95 % of ours_vs_best
    ours: float | None = None  # vs REFERENCE (or the best baseline without one)
    exported: float = FALLBACK


def no_kernel(reason: str) -> Verdict:
    return Verdict(won=False, reason=reason)


def decide(gate_failures: list[str], samples_us: dict[str, list[float]]) -> Verdict:
    """`samples_us`: the harness-reported samples of "candidate" and each baseline (same run,
    interleaved). A candidate with gate failures is never a winner, however fast."""
    baselines = {k: v for k, v in samples_us.items() if k != "candidate" and v}
    cand = samples_us.get("candidate") or []
    if not cand or not baselines:
        return no_kernel("no timing")
    call = wins.of_samples(samples_us)
    fastest, closest = call.fastest, call.closest
    assert fastest is not None and closest is not None  # every speedup here is a number
    medians = {k: statistics.median(v) for k, v in baselines.items()}
    reference = REFERENCE if REFERENCE in medians else fastest.baseline
    ours = medians[reference] / statistics.median(cand)
    if gate_failures:
        reason, won = "failed gate", False
    elif call.beats:
        reason, won = "won", True
    else:
        reason, won = f"not faster than {closest.baseline}", False
    return Verdict(
        won=won,
        reason=reason,
        best_baseline=fastest.baseline,
        ours_vs_best=fastest.speedup,
        ci_vs_best=fastest.ci,
        # A kernel that failed its gate has no "ours": it computes something else.
        ours=None if gate_failures else ours,
        exported=ours if won else FALLBACK,
    )
