"""planner: read the best, the history and the bottleneck; choose the next move.

Offline: the first planned step tries the op's starting points for the problem's shape class
(Op.starting_points: the measured leaders), then untried families' defaults (Triton before
CUDA C++, then tier order). Later, the playbook names the bottleneck and which way to move
each knob, and the learning search (search.py) picks points of one family, chosen by an upper
confidence bound over the families tried so far, around that family's best point. LLM: the
same facts in a prompt, answered as JSON and checked; a planner that keeps failing falls back
to offline.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agents import playbook, prompts
from agents.config import Provider
from agents.context import RunContext
from agents.search import Observation, SurrogateSearch, point_key
from agents.state import OptimizeState, Plan, Record, StopReason

KEPT_LIKE = ("kept", "baseline", "reverted")  # attempts that produced a timed, correct result
FAMILY_EXPLORE = 0.3


def planner(
    state: OptimizeState, runtime: Runtime[RunContext]
) -> Command[Literal["coder", "verify"]]:
    ctx = runtime.context
    if ctx.reporter.cancel_requested():  # checked again here: an LLM plan can take a while
        return _stop(state, ctx, StopReason.CANCELLED)
    notes: list[str] = []
    plan: Plan | None = None
    if ctx.config.planner is Provider.LLM and ctx.llm is not None:
        from agents.llm import LLMError, LLMErrorKind

        try:
            plan = llm_plan(state, ctx)
        except LLMError as exc:
            if exc.kind is LLMErrorKind.BUDGET:
                return _stop(
                    state,
                    ctx,
                    StopReason.LLM_TOKENS if "token" in str(exc) else StopReason.LLM_COST,
                )
            notes.append(
                f"planner #{state.get('next_index', 0)}: LLM failed ({exc}); offline plan instead"
            )
    if plan is None:
        plan = offline_plan(state, ctx)
    update: dict[str, Any] = {
        "elapsed_s": ctx.elapsed(),
        "planner_steps": _planner_steps(state) + 1,
        **_spent(ctx),
    }
    if notes:
        update["notes"] = state.get("notes", []) + notes
    if plan is None:
        update["stop_reason"] = StopReason.EXHAUSTED.value
        return Command(goto="verify", update=update)
    update["plan"] = plan
    return Command(goto="coder", update=update)


def offline_plan(state: OptimizeState, ctx: RunContext) -> Plan | None:
    history = state.get("history", [])
    best = state.get("best")
    diagnosis = playbook.diagnose(state.get("latest_profile"), best["evaluation"] if best else None)
    step = sum(1 for r in history if r["index"] > 0)
    if ctx.config.coder is Provider.LLM and best is not None and _planner_steps(state) % 2 == 1:
        return Plan(
            hypothesis=f"{diagnosis.evidence}: {diagnosis.advice}",
            move="rewrite",
            points=[],
            rewrite=f"{diagnosis.advice}. Keep the output identical; change only how it is computed.",
            llm_tokens=0,
            llm_cost_usd=0.0,
        )
    rng = random.Random(f"{ctx.config.seed}:{state.get('next_index', 0)}")
    seen = set(_seen_points(history))
    points: list[dict[str, Any]] = []
    families = ctx.families
    tried = {r["family"] for r in history if r["family"]}
    starts = _starting_points(ctx, seen) if step == 0 else []
    # The first planned step spends its batch on the points that led the search for this
    # shape class (the op's starting points), then on untried families' defaults: cheap and
    # informative. CUDA C++ families come after the Triton ones: they are starters, slow to
    # build and to run; they are still tried once a batch has room for them.
    untried = sorted(
        (n for n in families if n not in tried),
        key=lambda n: (families[n].backend != "triton", playbook.family_tier(n)),
    )
    defaults = [{"family": n, "params": families[n].default(ctx.problem)} for n in untried]
    if step > 0:
        # Later steps give untried families at most half the batch; the rest refines the
        # best. A whole batch of defaults cost ~2.5 GPU-minutes on the H200 (a CUDA build
        # among them), a quarter of a 10-minute run.
        defaults = defaults[: max(1, ctx.config.batch_size // 2)]
    words = f"{diagnosis.evidence}: {diagnosis.advice}."
    # Each point carries the reason for that point: a candidate's hypothesis must name its own
    # family and change, not the batch's first one (issue 17).
    for point in [*starts, *defaults]:
        key = _key(point["family"], point["params"])
        if len(points) < ctx.config.batch_size and key not in seen:
            seen.add(key)
            why = (
                f"a measured starting point for this shape class ({point['family']};"
                f" kernels/ops/{ctx.op.name}/starting_points.py)"
                if any(point is s for s in starts)
                else f"{point['family']} at its default point (not tried yet)"
            )
            point["hypothesis"] = f"{words} {why}"
            points.append(point)
    chosen = _choose_family(history, families, rng)
    hypothesis = ""
    for name in chosen:
        if len(points) >= ctx.config.batch_size:
            break
        family = families[name]
        space = family.space(ctx.problem)
        search = SurrogateSearch(space, lambda p, f=family: f.check(ctx.problem, p), rng=rng)
        obs = [Observation(r["params"], _log_speedup(r)) for r in history if r["family"] == name]
        anchor = _best_point(history, name) or family.default(ctx.problem)
        prefs = playbook.preferences(diagnosis.bottleneck, list(space.choices))
        exclude = {point_key(p["params"]) for p in points if p["family"] == name}
        proposed = search.propose(
            obs, k=ctx.config.batch_size - len(points), anchor=anchor, exclude=exclude, prior=prefs
        )
        for params in proposed:
            predicted = math.exp(search.predict(obs, params)) if obs else None
            guess = f"; surrogate predicts {predicted:.3g}x" if predicted else ""
            why = f"{name}: {_describe_change(anchor, params)}{guess}"
            points.append({"family": name, "params": params, "hypothesis": f"{words} {why}"})
            hypothesis = hypothesis or why
    if not points:
        return None
    started = [p for p in points if any(p is s for s in starts)]
    if started:
        names = ", ".join(dict.fromkeys(p["family"] for p in started))
        hypothesis = (
            f"start from {len(started)} of the measured starting points for this shape class"
            f" ({names}; kernels/ops/{ctx.op.name}/starting_points.py),"
            " then untried families' defaults as the batch allows"
        )
    elif step == 0 or not hypothesis:
        hypothesis = "try each family's default and the search's first picks"
    return Plan(
        hypothesis=f"{words} {hypothesis}",
        move="params",
        points=points,
        rewrite="",
        llm_tokens=0,
        llm_cost_usd=0.0,
    )


def llm_plan(state: OptimizeState, ctx: RunContext) -> Plan:
    assert ctx.llm is not None
    history = state.get("history", [])
    best = state.get("best")
    diagnosis = playbook.diagnose(state.get("latest_profile"), best["evaluation"] if best else None)
    families = ctx.families
    fam_text = prompts.format_families(
        [
            {
                "name": f.name,
                "description": f.description,
                "choices": dict(f.space(ctx.problem).choices),
            }
            for f in families.values()
        ]
    )
    best_text = (
        f"#{best['index']} {best['family']} {json.dumps(best['params'], default=str)} "
        f"{best['speedup']:.3f}x against {ctx.config.baseline}"
        if best
        else "nothing correct yet"
    )
    messages = [
        {"role": "system", "content": prompts.PLANNER_SYSTEM.format(batch=ctx.config.batch_size)},
        {
            "role": "user",
            "content": prompts.PLANNER_USER.format(
                problem=ctx.problem.key,
                flops=ctx.op.flops(ctx.problem),
                bytes=ctx.op.bytes_moved(ctx.problem),
                bottleneck=diagnosis.bottleneck.value,
                evidence=diagnosis.evidence,
                advice=diagnosis.advice,
                best=best_text,
                profile=json.dumps(state.get("latest_profile") or {}, default=str)[:1500],
                families=fam_text,
                baseline=ctx.config.baseline,
                history=prompts.format_history(list(history)),
            ),
        },
    ]
    before_tokens, before_cost = ctx.llm.spent.tokens, ctx.llm.spent.cost_usd
    seen = set(_seen_points(history))

    def parse(text: str) -> Plan:
        return parse_plan(
            text, ctx, seen, can_rewrite=ctx.config.coder is Provider.LLM and best is not None
        )

    plan = ctx.llm.complete_parsed(
        messages, parse, retries=ctx.config.llm.reply_retries, json_mode=True
    )
    plan["llm_tokens"] = ctx.llm.spent.tokens - before_tokens
    plan["llm_cost_usd"] = ctx.llm.spent.cost_usd - before_cost
    return plan


def parse_plan(text: str, ctx: RunContext, seen: set[str], *, can_rewrite: bool) -> Plan:
    """Validate the LLM's JSON plan against the families; ValueError says what to fix."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("reply with one JSON object")
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("reply with one JSON object")
    hypothesis = str(data.get("hypothesis") or "").strip()
    if not hypothesis:
        raise ValueError("'hypothesis' is missing")
    move = data.get("move")
    if move == "rewrite":
        request = str(data.get("rewrite") or "").strip()
        if not can_rewrite:
            raise ValueError("code rewrites are not available now; use a 'params' move")
        if not request:
            raise ValueError("a 'rewrite' move needs the change in 'rewrite'")
        return Plan(
            hypothesis=hypothesis,
            move="rewrite",
            points=[],
            rewrite=request,
            llm_tokens=0,
            llm_cost_usd=0.0,
        )
    if move != "params":
        raise ValueError("'move' must be 'params' or 'rewrite'")
    name = data.get("family")
    family = ctx.families.get(str(name))
    if family is None:
        raise ValueError(f"unknown family {name!r}; choose one of {sorted(ctx.families)}")
    raw = data.get("points")
    if not isinstance(raw, list) or not raw:
        raise ValueError("'points' must be a non-empty list of parameter objects")
    points = []
    problems = []
    for params in raw[: ctx.config.batch_size]:
        if not isinstance(params, dict):
            problems.append(f"{params!r} is not an object")
            continue
        try:
            why = family.check(ctx.problem, params)
        except Exception as exc:  # e.g. a value of the wrong type
            why = f"{type(exc).__name__}: {exc}"
        if why:
            problems.append(f"{json.dumps(params, default=str)}: {why}")
        elif _key(family.name, params) in seen:
            problems.append(f"{json.dumps(params, default=str)} was tried already")
        else:
            points.append({"family": family.name, "params": dict(params)})
    if not points:
        raise ValueError("no usable point: " + "; ".join(problems))
    return Plan(
        hypothesis=hypothesis,
        move="params",
        points=points,
        rewrite="",
        llm_tokens=0,
        llm_cost_usd=0.0,
    )


def _starting_points(ctx: RunContext, seen: set[str]) -> list[dict[str, Any]]:
    """The op's starting points for this problem, best first: completed from the family's
    default, valid, unseen, and only of the families this evaluator can run."""
    points: list[dict[str, Any]] = []
    families = ctx.families
    for name, partial in ctx.op.starting_points(ctx.problem):
        family = families.get(name)
        if family is None:
            continue
        params = {**family.default(ctx.problem), **partial}
        try:
            why = family.check(ctx.problem, params)
        except Exception as exc:  # a point written for another version of the family
            why = f"{type(exc).__name__}: {exc}"
        if why is None and _key(name, params) not in seen:
            points.append({"family": name, "params": params})
    return points


def _choose_family(
    history: list[Record], families: dict[str, Any], rng: random.Random
) -> list[str]:
    """Families by upper confidence bound on their best log-speedup; best first."""
    scores = []
    total = max(1, sum(1 for r in history if r["family"]))
    for name in families:
        runs = [r for r in history if r["family"] == name]
        results = [s for r in runs if (s := _log_speedup(r)) is not None]
        best = max(results) if results else -1.0
        bonus = FAMILY_EXPLORE * math.sqrt(math.log(total + 1) / (len(runs) + 1))
        scores.append((best + bonus, rng.random(), name))
    return [name for *_, name in sorted(scores, reverse=True)]


def _log_speedup(record: Record) -> float | None:
    if record["verdict"] in KEPT_LIKE and record["speedup"] and record["speedup"] > 0:
        return math.log(record["speedup"])
    return None


def _best_point(history: list[Record], family: str) -> dict[str, Any] | None:
    runs = [(s, r) for r in history if r["family"] == family and (s := _log_speedup(r)) is not None]
    return dict(max(runs, key=lambda x: x[0])[1]["params"]) if runs else None


def _seen_points(history: list[Record]) -> list[str]:
    return [_key(r["family"], r["params"]) for r in history if r["family"]]


def _key(family: str | None, params: dict[str, Any]) -> str:
    return f"{family}:{point_key(params)}"


def _describe_change(anchor: dict[str, Any], params: dict[str, Any]) -> str:
    changes = [f"{k} {anchor.get(k)}->{v}" for k, v in params.items() if anchor.get(k) != v]
    return ", ".join(changes) if changes else "its default point"


def _planner_steps(state: OptimizeState) -> int:
    return int(state.get("planner_steps", 0))


def _spent(ctx: RunContext) -> dict[str, Any]:
    if ctx.llm is None:
        return {}
    return {"llm_tokens": ctx.llm.spent.tokens, "llm_cost_usd": ctx.llm.spent.cost_usd}


def _stop(
    state: OptimizeState, ctx: RunContext, reason: StopReason
) -> Command[Literal["coder", "verify"]]:
    return Command(
        goto="verify",
        update={"stop_reason": reason.value, "elapsed_s": ctx.elapsed(), **_spent(ctx)},
    )
