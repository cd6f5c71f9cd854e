import math
import random

from agents.search import Observation, SurrogateSearch, point_key
from kernels.problem import ParamSpace

SPACE = ParamSpace(
    {"BLOCK": [16, 32, 64, 128, 256], "num_warps": [2, 4, 8], "num_stages": [1, 2, 3]}
)


def no_check(params):
    return None


def test_it_proposes_only_valid_untried_points():
    def check(params):
        return "too big" if params["BLOCK"] == 256 and params["num_warps"] == 2 else None

    search = SurrogateSearch(SPACE, check, rng=random.Random(0))
    tried = [Observation({"BLOCK": 64, "num_warps": 4, "num_stages": 2}, 0.1)]
    points = search.propose(tried, k=40, anchor=tried[0].params)
    keys = [point_key(p) for p in points]
    assert len(points) == 40 and len(set(keys)) == 40
    assert point_key(tried[0].params) not in keys
    assert all(check(p) is None for p in points)


def test_it_learns_which_values_are_fast():
    # Larger BLOCK is faster; warps and stages do not matter.
    rng = random.Random(1)
    obs = []
    for _ in range(12):
        p = {
            "BLOCK": rng.choice([16, 32, 64, 128]),
            "num_warps": rng.choice([2, 4, 8]),
            "num_stages": rng.choice([1, 2, 3]),
        }
        obs.append(Observation(p, math.log(1 + p["BLOCK"] / 64)))
    search = SurrogateSearch(SPACE, no_check, rng=random.Random(2))
    picks = search.propose(obs, k=3, anchor=None)
    assert all(p["BLOCK"] >= 128 for p in picks)
    fast = search.predict(obs, {"BLOCK": 128, "num_warps": 4, "num_stages": 2})
    slow = search.predict(obs, {"BLOCK": 16, "num_warps": 4, "num_stages": 2})
    assert fast > slow


def test_it_steers_away_from_values_that_failed():
    obs = [
        Observation({"BLOCK": 256, "num_warps": w, "num_stages": s}, None)
        for w in (2, 4)
        for s in (1, 2)
    ] + [Observation({"BLOCK": 64, "num_warps": 4, "num_stages": 1}, 0.0)]
    search = SurrogateSearch(SPACE, no_check, rng=random.Random(0))
    picks = search.propose(obs, k=4, anchor=None)
    assert all(p["BLOCK"] != 256 for p in picks)


def test_it_spreads_a_batch_over_untried_values():
    search = SurrogateSearch(SPACE, no_check, rng=random.Random(3))
    picks = search.propose([], k=5, anchor=None)
    assert len({p["BLOCK"] for p in picks}) == 5


def test_it_follows_the_playbook_direction_from_the_anchor():
    anchor = {"BLOCK": 64, "num_warps": 4, "num_stages": 2}
    obs = [Observation(anchor, 0.0)]
    up = SurrogateSearch(SPACE, no_check, rng=random.Random(0)).propose(
        obs, k=3, anchor=anchor, prior={"BLOCK": +1}
    )
    down = SurrogateSearch(SPACE, no_check, rng=random.Random(0)).propose(
        obs, k=3, anchor=anchor, prior={"BLOCK": -1}
    )
    assert all(p["BLOCK"] > 64 for p in up)
    assert all(p["BLOCK"] < 64 for p in down)


def test_it_is_deterministic_for_a_seed():
    a = SurrogateSearch(SPACE, no_check, rng=random.Random(7)).propose([], k=6, anchor=None)
    b = SurrogateSearch(SPACE, no_check, rng=random.Random(7)).propose([], k=6, anchor=None)
    assert a == b


def test_it_returns_nothing_when_the_space_is_exhausted():
    tiny = ParamSpace({"BLOCK": [32, 64]})
    obs = [Observation({"BLOCK": 32}, 0.0), Observation({"BLOCK": 64}, 0.1)]
    assert (
        SurrogateSearch(tiny, no_check, rng=random.Random(0)).propose(obs, k=2, anchor=None) == []
    )


def test_it_refines_near_the_best_and_explores_once_per_batch():
    space = ParamSpace({f"P{i}": [1, 2, 3, 4] for i in range(6)})
    anchor = {f"P{i}": 2 for i in range(6)}
    search = SurrogateSearch(space, no_check, rng=random.Random(4))
    picks = search.propose(
        [Observation(anchor, 0.0)], k=4, anchor=anchor, prior={"P0": +1, "P1": +1}
    )
    changed = [sum(p[n] != anchor[n] for n in anchor) for p in picks]
    assert all(c <= 2 for c in changed[:3]), changed
    assert changed[-1] > 2  # the batch's one exploration pick
