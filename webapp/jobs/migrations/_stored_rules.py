"""The baseline rule as it stood when results were first stored with their own call (0007), for
data migrations of rows recorded before then. Frozen on purpose: a migration replays history;
the live rule is harness/judge/wins.py, which the web app may not import (workers pass its call).
"""

import math
from typing import Any


def beat_every_baseline(evaluation: dict[str, Any] | None) -> bool:
    """For every baseline timed, the speedup's lower bound is above 1: the bootstrap 95 %
    interval where the result has one, else the speedup less the measured noise."""
    timings = (evaluation or {}).get("timings")
    timings = timings if isinstance(timings, dict) else {}
    speedups = timings.get("speedups")
    if not isinstance(speedups, dict) or not speedups:
        return False
    intervals = timings.get("speedup_ci")
    intervals = intervals if isinstance(intervals, dict) else {}
    noise = timings.get("noise")
    noise = noise if _number(noise) and noise > 0 else 0.0
    for name, speedup in speedups.items():
        if not _number(speedup):
            return False
        ci = intervals.get(name)
        low = ci[0] if isinstance(ci, list | tuple) and len(ci) == 2 and _number(ci[0]) else None
        if (low if low is not None else speedup / (1.0 + noise)) <= 1.0:
            return False
    return True


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
