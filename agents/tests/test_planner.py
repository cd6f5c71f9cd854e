"""The offline planner: where the search starts (the op's measured starting points), and that
every family's space is searched from there, learning from what the screen found."""

from agents import Budget, OptimizeConfig
from agents.context import RunContext
from agents.nodes.planner import _key, offline_plan
from agents.state import Screened
from agents.tests.fakes import FakeEvaluator, ListReporter
from kernels import get_op, parse_problem

LARGE = parse_problem("matmul", "4096x4096x4096", "bf16", "NN")
UNSEEN = parse_problem("matmul", "3000x1536x7168", "bf16", "NN")  # odd M, deep-ish K


class TritonOnly(FakeEvaluator):
    def supports(self, backend: str) -> bool:  # a CPU worker: no nvcc, no GPU
        return backend == "triton"


def context(problem, evaluator=None, **kw) -> RunContext:
    evaluator = evaluator or FakeEvaluator(lambda source: 1.0)
    kw.setdefault("budget", Budget(wall_s=200))
    config = OptimizeConfig(evaluator=evaluator, **kw)
    return RunContext(config, problem, get_op(problem.op), evaluator, ListReporter())


def starting_points(ctx: RunContext) -> list[tuple[str, dict]]:
    """The op's starting points of the families this evaluator runs, completed."""
    families = ctx.families
    return [
        (name, {**families[name].default(ctx.problem), **partial})
        for name, partial in ctx.op.starting_points(ctx.problem)
        if name in families
    ]


def screened(family: str, params: dict, speedup: float | None) -> Screened:
    return Screened(
        family=family,
        params=params,
        candidate_id=f"{family}{sorted(params.items())}",
        verdict="passed" if speedup else "incorrect",
        speedup=speedup,
        noise=0.01,
        rounds=1,
        verified=None,
        why="" if speedup else "incorrect",
    )


def test_the_first_batch_starts_from_the_measured_starting_points_then_every_family():
    ctx = context(LARGE, screen_batch=48)
    plan = offline_plan({}, ctx)

    assert plan is not None and plan["move"] == "screen"
    got = [(p["family"], p["params"]) for p in plan["points"]]
    starts = starting_points(ctx)
    assert got[: len(starts)] == starts
    # The H100 leaders of this shape class come first (CUTLASS, then the rest).
    assert {name for name, _ in starts[:4]} == {"matmul_cutlass_sm90"}
    assert "measured starting points for this shape class" in plan["hypothesis"]
    # Every family's space is searched, not just the tables: each one is in the batch.
    assert {p["family"] for p in plan["points"]} == {f.name for f in ctx.op.families()}
    keys = [_key(*g) for g in got]
    assert len(keys) == len(set(keys)) and len(keys) == 48
    # CUDA C++ (slow to build) comes after every Triton family's default.
    names = [p["family"] for p in plan["points"]]
    triton = {f.name for f in ctx.op.families() if f.backend == "triton"}
    assert all(names.index(t) < names.index("matmul_cuda_wmma") for t in triton), names


def test_it_plans_only_families_the_evaluator_can_run():
    ctx = context(LARGE, TritonOnly(lambda source: 1.0), screen_batch=32)
    plan = offline_plan({}, ctx)
    assert plan is not None and len(plan["points"]) == 32
    assert all(p["family"] != "matmul_cuda_wmma" for p in plan["points"])


def test_it_plans_only_families_that_read_the_problems_layout():
    """qkv_rotary's interleaved weight is the CUTLASS family's alone: the dual family has no
    point for it (its default raised IndexError in the first Qwen2 job that planned it: H200,
    2026-11-29), and a CPU worker then has no family at all."""
    problem = parse_problem("qkv_rotary", "2048x16x16x64x1024", "bf16", "i8+kv_heads=16")
    plan = offline_plan({}, context(problem, screen_batch=8))
    assert plan is not None and plan["move"] == "screen"
    assert {p["family"] for p in plan["points"]} == {"qkv_rotary_cutlass_sm90"}
    assert context(problem, TritonOnly(lambda source: 1.0)).families == {}


def test_points_already_screened_or_queued_are_not_planned_again():
    ctx = context(LARGE, screen_batch=8)
    starts = starting_points(ctx)
    state = {
        "screened": {_key(*starts[0]): screened(*starts[0], 0.95)},
        "queued": [{"family": starts[1][0], "params": starts[1][1]}],
    }
    plan = offline_plan(state, ctx)
    assert plan is not None
    keys = {_key(p["family"], p["params"]) for p in plan["points"]}
    assert _key(*starts[0]) not in keys and _key(*starts[1]) not in keys


def test_later_batches_search_around_each_familys_best_screened_point():
    ctx = context(LARGE, TritonOnly(lambda source: 1.0), screen_batch=12)
    starts = starting_points(ctx)
    name, best = next((n, p) for n, p in starts if n == "matmul_persistent_tma")
    others = [(n, p) for n, p in starts if n == name][1:4]
    state = {
        "screened": {
            _key(name, best): screened(name, best, 1.05),
            **{_key(n, p): screened(n, p, 0.8) for n, p in others},
        }
    }
    plan = offline_plan(state, ctx)
    assert plan is not None and "measured starting points" not in plan["hypothesis"]
    ours = [p["params"] for p in plan["points"] if p["family"] == name]
    assert ours, "the family of the best screened point is searched"
    # The search's first pick moves a knob or two away from that point (its anchor).
    assert sum(ours[0][k] != best[k] for k in best) <= 2, ours[0]


def test_an_unseen_shape_gets_candidates_from_every_familys_space():
    ctx = context(UNSEEN, TritonOnly(lambda source: 1.0), screen_batch=40)
    first = offline_plan({}, ctx)
    assert first is not None
    state = {
        "screened": {
            _key(p["family"], p["params"]): screened(p["family"], p["params"], 0.9)
            for p in first["points"]
        }
    }
    second = offline_plan(state, ctx)
    assert second is not None and len(second["points"]) == 40
    families = {f.name for f in ctx.op.families() if f.backend == "triton"}
    assert {p["family"] for p in second["points"]} == families
    for p in second["points"]:
        family = next(f for f in ctx.op.families() if f.name == p["family"])
        assert family.check(UNSEEN, p["params"]) is None


def test_an_op_without_starting_points_starts_from_family_defaults():
    problem = parse_problem("swiglu", "64x128x256", "fp16")  # the one op that has none
    ctx = context(problem, screen_batch=4)
    plan = offline_plan({}, ctx)
    assert plan is not None and 1 <= len(plan["points"]) <= 4
    assert "measured starting points" not in plan["hypothesis"]


def test_nothing_left_and_nothing_queued_ends_the_plan():
    problem = parse_problem("attention", "1x4x64x32", "fp16", "causal")
    ctx = context(problem, screen_batch=10_000)
    plan = offline_plan({}, ctx)
    assert plan is not None
    everything = {
        _key(p["family"], p["params"]): screened(p["family"], p["params"], 1.0)
        for p in plan["points"]
    }
    assert offline_plan({"screened": everything}, ctx) is None


def test_a_distrusted_family_yields_the_batch_to_the_others():
    """A family whose finalists kept failing tier two sends no more finalists (tiers.py); with
    the best screen numbers it still led every batch, so a run screened only such families
    until its time ran out (found when gemv's weight-stream family joined the registry)."""
    ctx = context(LARGE, screen_batch=4)
    defaults = [(f.name, f.default(LARGE)) for f in ctx.op.families()]
    liar = next((n, p) for n, p in defaults if n == "matmul_splitk")
    honest = [(n, p) for n, p in defaults if n != liar[0]]
    failed = [
        {"index": i, "family": liar[0], "params": {**liar[1], "BLOCK_K": b}, "tier": "verify"}
        | {"verdict": "incorrect", "parent": None}
        for i, b in enumerate((32, 128))
    ]
    state = {
        "screened": {
            _key(*liar): screened(*liar, 10.0),
            **{_key(n, p): screened(n, p, 1.0) for n, p in honest},
        },
        "history": failed,
    }
    plan = offline_plan(state, ctx)
    assert plan is not None and plan["points"]
    assert liar[0] not in {p["family"] for p in plan["points"]}
    # Without the failures the same screen numbers put it first.
    plan = offline_plan({**state, "history": []}, ctx)
    assert plan is not None and plan["points"][0]["family"] == liar[0]


def library_of(problem, pick) -> list[dict]:
    """Built library points as harness.library.points_for gives them (a chosen subset)."""
    cutlass = next(f for f in get_op("matmul").families() if f.name == "matmul_cutlass_sm90")
    return [
        {"family": cutlass.name, "params": p} for p in cutlass.library_points(problem) if pick(p)
    ]


def test_the_machines_library_fills_the_first_batch_after_the_starts_and_the_defaults():
    ctx = context(UNSEEN, screen_batch=48)
    ctx.library = library_of(UNSEEN, lambda p: p["TILE_K"] == 64)  # what this machine built
    plan = offline_plan({}, ctx)
    assert plan is not None and len(plan["points"]) == 48
    keys = [_key(p["family"], p["params"]) for p in plan["points"]]
    built = {_key(p["family"], p["params"]) for p in ctx.library}
    defaults = [_key(f.name, f.default(UNSEEN)) for f in ctx.op.families()]
    assert set(defaults) <= set(keys)  # every family's default still goes first
    from_library = [
        i for i, p in enumerate(plan["points"]) if "screened without a compile" in p["hypothesis"]
    ]
    assert len(from_library) > 20 and all(keys[i] in built for i in from_library)
    assert min(from_library) > max(keys.index(d) for d in defaults)
    assert from_library == list(range(min(from_library), 48))  # they fill the batch
    assert "built library points" in plan["hypothesis"]


def test_later_batches_keep_a_share_for_the_library_the_surrogates_picks_first():
    ctx = context(LARGE, screen_batch=10, library_share=0.5)
    ctx.library = library_of(LARGE, lambda p: True)
    # The screen saw three builds that differ only in their scheduler: stream-K did best.
    speed = {"persistent": 0.7, "streamk": 1.1, "batched_splitk": 0.6}
    seen = [next(p for p in ctx.library if p["params"]["SCHEDULER"] == s) for s in speed]
    state = {
        "screened": {
            _key(p["family"], p["params"]): screened(
                p["family"], p["params"], speed[p["params"]["SCHEDULER"]]
            )
            for p in seen
        }
    }
    plan = offline_plan(state, ctx)
    assert plan is not None
    built = {_key(p["family"], p["params"]) for p in ctx.library}
    ours = [p for p in plan["points"] if _key(p["family"], p["params"]) in built]
    assert len(ours) == 5  # half the batch; the search picks the rest
    assert not {_key(p["family"], p["params"]) for p in ours} & set(state["screened"])
    assert {p["params"]["SCHEDULER"] for p in ours} == {"streamk"}
