"""A search over one family's ParamSpace that learns from results instead of walking a grid.

The surrogate is a main-effects model of log(speedup): each parameter value's effect is the
mean residual of the attempts that used it, shrunk toward zero when few attempts did. Points
are ranked by predicted score + an exploration bonus for rarely tried values + the playbook's
preferred direction away from the anchor (the family's best point). After each pick the
chosen values count as tried, so a batch spreads out instead of repeating one guess.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernels.problem import ParamSpace

FAILED_PENALTY = 0.5  # a failed point scores this far below the worst success (log units)
ENUMERATE_UP_TO = 20_000  # larger spaces are sampled
SAMPLES = 3_000
SHRINK = 1.0  # prior pseudo-count for each value's effect
EXPLORE = 0.15  # weight of the exploration bonus (log units)
PRIOR = 0.05  # weight of the playbook's direction (mean over the knobs it names)
# Trust region: each parameter changed from the anchor costs this much, so with few results
# the search refines around the best instead of jumping across the space; the last pick of
# a batch ignores it, so every batch still explores once.
LOCALITY = 0.02


def point_key(params: Mapping[str, Any]) -> str:
    """A stable text key for a parameter point (values are JSON scalars)."""
    return json.dumps(dict(params), sort_keys=True, default=str)


@dataclass(frozen=True)
class Observation:
    params: Mapping[str, Any]
    log_speedup: float | None  # None: failed (did not compile, incorrect, timed out, cheat)


class SurrogateSearch:
    def __init__(
        self,
        space: ParamSpace,
        check: Callable[[Mapping[str, Any]], str | None],
        *,
        rng: random.Random,
    ) -> None:
        self.space = space
        self.names = list(space.choices)
        self.check = check
        self.rng = rng

    def propose(
        self,
        observations: Sequence[Observation],
        *,
        k: int,
        anchor: Mapping[str, Any] | None,
        exclude: Iterable[str] = (),
        prior: Mapping[str, int] | None = None,
    ) -> list[dict[str, Any]]:
        """Up to k valid, untried points, best acquisition first."""
        excluded = set(exclude) | {point_key(o.params) for o in observations}
        pool = [p for p in self._pool(anchor) if point_key(p) not in excluded and self._valid(p)]
        if not pool:
            return []
        mean, effects, counts = self._fit(observations)
        chosen: list[dict[str, Any]] = []
        counts = {name: dict(c) for name, c in counts.items()}
        while pool and len(chosen) < k:
            local = anchor is not None and (len(chosen) < k - 1 or k == 1)
            scored = [
                (self._acquisition(p, mean, effects, counts, anchor, prior or {}, local=local), i)
                for i, p in enumerate(pool)
            ]
            best = max(s for s, _ in scored)
            # Ties (common before any data) are broken at random, deterministically per seed.
            ties = [i for s, i in scored if s >= best - 1e-12]
            pick = pool.pop(self.rng.choice(ties))
            chosen.append(pick)
            for name in self.names:
                key = _value_key(pick[name])
                counts[name][key] = counts[name].get(key, 0) + 1
        return chosen

    def predict(self, observations: Sequence[Observation], params: Mapping[str, Any]) -> float:
        """The surrogate's predicted log(speedup) at a point (tests and hypotheses use it)."""
        mean, effects, _ = self._fit(observations)
        return mean + sum(effects[n].get(_value_key(params[n]), 0.0) for n in self.names)

    def _valid(self, params: Mapping[str, Any]) -> bool:
        try:
            return self.check(params) is None
        except Exception:
            return False

    def _pool(self, anchor: Mapping[str, Any] | None) -> list[dict[str, Any]]:
        """Every point of small spaces; otherwise the anchor's neighbourhood plus a sample."""
        choices = [list(self.space.choices[n]) for n in self.names]
        if self.space.size() <= ENUMERATE_UP_TO:
            return [
                dict(zip(self.names, combo, strict=True)) for combo in itertools.product(*choices)
            ]
        points = [
            {n: self.rng.choice(values) for n, values in zip(self.names, choices, strict=True)}
            for _ in range(SAMPLES)
        ]
        if anchor is not None:
            points.extend(self._neighbours(anchor))
        unique = {point_key(p): p for p in points}
        return list(unique.values())

    def _neighbours(self, anchor: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Points one or two steps away from the anchor along each parameter's value list."""
        steps: list[list[tuple[str, Any]]] = []
        for name in self.names:
            values = list(self.space.choices[name])
            if anchor.get(name) not in values:
                continue
            i = values.index(anchor[name])
            steps.append(
                [(name, values[j]) for j in (i - 2, i - 1, i + 1, i + 2) if 0 <= j < len(values)]
            )
        points = []
        for a, b in itertools.combinations(range(len(steps)), 2):
            for (na, va), (nb, vb) in itertools.product(steps[a], steps[b]):
                points.append({**anchor, na: va, nb: vb})
        for options in steps:
            points.extend({**anchor, name: value} for name, value in options)
        return [dict(p) for p in points]

    def _fit(
        self, observations: Sequence[Observation]
    ) -> tuple[float, dict[str, dict[str, float]], dict[str, dict[str, int]]]:
        successes = [o.log_speedup for o in observations if o.log_speedup is not None]
        floor = (min(successes) if successes else 0.0) - FAILED_PENALTY
        scores = [floor if o.log_speedup is None else o.log_speedup for o in observations]
        mean = sum(scores) / len(scores) if scores else 0.0
        sums: dict[str, dict[str, float]] = {n: {} for n in self.names}
        counts: dict[str, dict[str, int]] = {n: {} for n in self.names}
        for obs, score in zip(observations, scores, strict=True):
            for name in self.names:
                if name not in obs.params:
                    continue
                key = _value_key(obs.params[name])
                sums[name][key] = sums[name].get(key, 0.0) + (score - mean)
                counts[name][key] = counts[name].get(key, 0) + 1
        effects = {
            n: {key: total / (counts[n][key] + SHRINK) for key, total in sums[n].items()}
            for n in self.names
        }
        return mean, effects, counts

    def _acquisition(
        self,
        params: Mapping[str, Any],
        mean: float,
        effects: Mapping[str, Mapping[str, float]],
        counts: Mapping[str, Mapping[str, int]],
        anchor: Mapping[str, Any] | None,
        prior: Mapping[str, int],
        *,
        local: bool,
    ) -> float:
        score = mean
        bonus = 0.0
        for name in self.names:
            key = _value_key(params[name])
            score += effects[name].get(key, 0.0)
            bonus += 1.0 / math.sqrt(1.0 + counts[name].get(key, 0))
        score += EXPLORE * bonus / max(1, len(self.names))
        if anchor is not None:
            agree = 0
            for name, direction in prior.items():
                values = list(self.space.choices.get(name, ()))
                if name in params and anchor.get(name) in values and params[name] in values:
                    moved = values.index(params[name]) - values.index(anchor[name])
                    agree += direction * _sign(moved)
            score += PRIOR * agree / max(1, len(prior))
            if local:
                score -= LOCALITY * sum(1 for n in self.names if params[n] != anchor.get(n))
        return score


def _value_key(value: Any) -> str:
    return json.dumps(value, default=str)


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)
