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
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.problem import ParamSpace

FAILED_PENALTY = 0.5  # a failed point scores this far below the worst success (log units)
ENUMERATE_UP_TO = 4_000  # larger spaces are sampled (a planner step must stay cheap)
SAMPLES = 3_000
SHRINK = 1.0  # prior pseudo-count for each value's effect
EXPLORE = 0.15  # weight of the exploration bonus (log units)
PRIOR = 0.05  # weight of the playbook's direction (mean over the knobs it names)
# Trust region: each parameter changed from the anchor costs this much, so with few results
# the search refines around the best instead of jumping across the space; the last pick of
# a batch ignores it, so every batch still explores once.
LOCALITY = 0.02

ValueKey = tuple[bool, Any]  # _value_key's result: True and 1 stay apart


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
        exclude: Iterable[Mapping[str, Any]] = (),
        prior: Mapping[str, int] | None = None,
    ) -> list[dict[str, Any]]:
        """Up to k valid points, none observed or in `exclude`, best acquisition first.

        Vectorized over the pool: a screen batch asks for dozens of points from pools of
        thousands, and the planner's step must not eat the search's time."""
        excluded = {self._key(p) for p in exclude} | {self._key(o.params) for o in observations}
        pool = [p for p in self._pool(anchor) if self._key(p) not in excluded and self._valid(p)]
        if not pool:
            return []
        mean, effects, counts = self._fit(observations)
        values = [list(self.space.choices[n]) for n in self.names]
        keys = [{_value_key(v): i for i, v in enumerate(vals)} for vals in values]
        idx = np.array(
            [[keys[j][_value_key(p[n])] for j, n in enumerate(self.names)] for p in pool],
            dtype=np.int64,
        ).reshape(len(pool), len(self.names))
        base = np.full(len(pool), mean)
        tried = []
        for j, name in enumerate(self.names):
            eff = np.array([effects[name].get(_value_key(v), 0.0) for v in values[j]])
            base += eff[idx[:, j]]
            tried.append(
                np.array([counts[name].get(_value_key(v), 0) for v in values[j]], dtype=np.float64)
            )
        moved = np.zeros(len(pool))
        if anchor is not None:
            agree = np.zeros(len(pool))
            for name, direction in (prior or {}).items():
                if name in self.names and anchor.get(name) in values[self.names.index(name)]:
                    j = self.names.index(name)
                    agree += direction * np.sign(idx[:, j] - values[j].index(anchor[name]))
            base += PRIOR * agree / max(1, len(prior or {}))
            for j, name in enumerate(self.names):
                at = keys[j].get(_value_key(anchor.get(name)), -1)
                moved += idx[:, j] != at
        chosen: list[dict[str, Any]] = []
        open_ = np.ones(len(pool), dtype=bool)
        while open_.any() and len(chosen) < k:
            bonus = sum(
                (1.0 / np.sqrt(1.0 + tried[j][idx[:, j]]) for j in range(len(self.names))),
                np.zeros(len(pool)),
            )
            score = base + EXPLORE * bonus / max(1, len(self.names))
            if anchor is not None and (len(chosen) < k - 1 or k == 1):
                score = score - LOCALITY * moved
            score = np.where(open_, score, -np.inf)
            best = score.max()
            # Ties (common before any data) are broken at random, deterministically per seed.
            ties = np.flatnonzero(score >= best - 1e-12).tolist()
            pick = ties[self.rng.randrange(len(ties))]
            open_[pick] = False
            chosen.append(pool[pick])
            for j in range(len(self.names)):
                tried[j][idx[pick, j]] += 1
        return chosen

    def predict(self, observations: Sequence[Observation], params: Mapping[str, Any]) -> float:
        """The surrogate's predicted log(speedup) at a point (tests and hypotheses use it)."""
        mean, effects, _ = self._fit(observations)
        return mean + sum(effects[n].get(_value_key(params[n]), 0.0) for n in self.names)

    def _key(self, params: Mapping[str, Any]) -> tuple[ValueKey, ...]:
        """A cheap identity for a point of this space (point_key is for storage)."""
        return tuple(_value_key(params.get(n)) for n in self.names)

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
        unique = {self._key(p): p for p in points}
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
    ) -> tuple[float, dict[str, dict[ValueKey, float]], dict[str, dict[ValueKey, int]]]:
        successes = [o.log_speedup for o in observations if o.log_speedup is not None]
        floor = (min(successes) if successes else 0.0) - FAILED_PENALTY
        scores = [floor if o.log_speedup is None else o.log_speedup for o in observations]
        mean = sum(scores) / len(scores) if scores else 0.0
        sums: dict[str, dict[ValueKey, float]] = {n: {} for n in self.names}
        counts: dict[str, dict[ValueKey, int]] = {n: {} for n in self.names}
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


def _value_key(value: Any) -> ValueKey:
    """A hashable key per parameter value (True and 1 stay apart); values are JSON scalars."""
    return (type(value) is bool, value)
