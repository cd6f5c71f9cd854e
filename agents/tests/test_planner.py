"""The offline planner's first moves: the op's measured starting points, Triton before CUDA C++."""

from agents import Budget, OptimizeConfig
from agents.context import RunContext
from agents.nodes.planner import _key, offline_plan
from agents.state import Record
from agents.tests.fakes import FakeEvaluator, ListReporter
from kernels import get_op, parse_problem

LARGE = parse_problem("matmul", "4096x4096x4096", "bf16", "NN")


class TritonOnly(FakeEvaluator):
    def supports(self, backend: str) -> bool:  # a CPU worker: no nvcc, no GPU
        return backend == "triton"


def context(problem, evaluator=None, **kw) -> RunContext:
    evaluator = evaluator or FakeEvaluator(lambda source: 1.0)
    kw.setdefault("budget", Budget(wall_s=200))
    config = OptimizeConfig(final_verify=False, evaluator=evaluator, **kw)
    op = get_op(problem.op)
    return RunContext(config, problem, op, evaluator, ListReporter())


def record(index: int, family: str, params: dict, speedup: float | None) -> Record:
    return Record(
        index=index,
        parent=None if index == 0 else 0,
        family=family,
        params=params,
        hypothesis="",
        verdict="baseline" if index == 0 else ("kept" if speedup else "incorrect"),
        reason="",
        candidate_id=f"c{index}",
        speedup=speedup,
        median_us=None,
        noise=0.01,
        pct_of_roof=None,
        gpu_s=1.0,
        profile_delta={},
    )


def after_baseline(ctx: RunContext) -> list[Record]:
    """What the baseline node leaves: the op's first family at its default, evaluated."""
    family = ctx.op.families()[0]
    return [record(0, family.name, family.default(ctx.problem), 0.92)]


def starting_points(ctx: RunContext) -> list[tuple[str, dict]]:
    """The op's starting points of the families this evaluator runs, completed."""
    families = ctx.families
    return [
        (name, {**families[name].default(ctx.problem), **partial})
        for name, partial in ctx.op.starting_points(ctx.problem)
        if name in families
    ]


def test_the_first_batch_for_a_large_matmul_is_its_measured_starting_points():
    ctx = context(LARGE, batch_size=4)
    plan = offline_plan({"history": after_baseline(ctx)}, ctx)

    assert plan is not None and plan["move"] == "params"
    got = [(p["family"], p["params"]) for p in plan["points"]]
    assert got == starting_points(ctx)[:4]
    assert {name for name, _ in got} == {"matmul_cutlass_sm90"}  # the H100 leaders
    assert "measured starting points for this shape class" in plan["hypothesis"]


def test_a_wide_first_batch_puts_the_cuda_starter_after_every_triton_family():
    ctx = context(LARGE, batch_size=64)
    plan = offline_plan({"history": after_baseline(ctx)}, ctx)

    assert plan is not None
    names = [p["family"] for p in plan["points"]]
    baseline = after_baseline(ctx)[0]
    starts = [
        (n, p)
        for n, p in starting_points(ctx)
        if (n, p) != (baseline["family"], baseline["params"])
    ]
    assert [(p["family"], p["params"]) for p in plan["points"][: len(starts)]] == starts
    assert "matmul_cuda_wmma" in names, "still tried when the batch has room"
    cuda_at = names.index("matmul_cuda_wmma")
    triton = {f.name for f in ctx.op.families() if f.backend == "triton"}
    assert all(names.index(t) < cuda_at for t in triton), names
    keys = [_key(p["family"], p["params"]) for p in plan["points"]]
    assert len(keys) == len(set(keys)) and _key(baseline["family"], baseline["params"]) not in keys


def test_the_first_batch_stays_within_the_batch_size_and_the_evaluators_backends():
    for batch in (1, 2, 4):
        ctx = context(LARGE, TritonOnly(lambda source: 1.0), batch_size=batch)
        plan = offline_plan({"history": after_baseline(ctx)}, ctx)
        assert plan is not None and len(plan["points"]) == batch
        assert all(p["family"] != "matmul_cuda_wmma" for p in plan["points"])


def test_a_starting_point_already_evaluated_is_not_planned_again():
    ctx = context(LARGE, batch_size=4)
    points = starting_points(ctx)
    # A baseline that happens to be the first starting point (e.g. a resumed run).
    history = [record(0, *points[0], 0.95)]
    plan = offline_plan({"history": history}, ctx)
    assert plan is not None
    assert [(p["family"], p["params"]) for p in plan["points"]] == points[1:5]


def test_later_steps_anchor_on_the_best_starting_point():
    ctx = context(LARGE, TritonOnly(lambda source: 1.0), batch_size=4)
    points = starting_points(ctx)
    history = after_baseline(ctx) + [
        record(i + 1, name, params, 1.05 if i == 2 else 0.8)
        for i, (name, params) in enumerate(points[:4])
    ]
    # Every Triton family has been tried, so the step is all search, around the best point.
    families = {f.name: f for f in ctx.op.families() if f.backend == "triton"}
    history += [
        record(len(history) + i, name, f.default(ctx.problem), 0.5)
        for i, (name, f) in enumerate(families.items())
        if name not in {r["family"] for r in history}
    ]
    plan = offline_plan({"history": history}, ctx)
    assert plan is not None
    best_name, best_params = points[2]
    assert "measured starting points" not in plan["hypothesis"]
    ours = [p["params"] for p in plan["points"] if p["family"] == best_name]
    assert ours, "the family of the best point is searched first"
    # The search's first pick moves a knob or two away from that point (its anchor), not from
    # the family's default (4 knobs away from it).
    default = families[best_name].default(ctx.problem)
    to_best = sum(ours[0][k] != best_params[k] for k in best_params)
    to_default = sum(ours[0][k] != default[k] for k in default)
    assert to_best <= 2 and to_best < to_default, ours[0]
    assert plan["hypothesis"].split(". ", 1)[1].startswith(f"{best_name}: ")


def test_an_op_without_starting_points_starts_from_family_defaults():
    problem = parse_problem("attention", "1x4x64x32", "fp16", "causal")
    ctx = context(problem, batch_size=4)
    plan = offline_plan({"history": after_baseline(ctx)}, ctx)
    assert plan is not None and 1 <= len(plan["points"]) <= 4
    assert "measured starting points" not in plan["hypothesis"]
