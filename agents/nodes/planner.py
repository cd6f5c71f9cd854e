"""planner: read the best, the screen's results and the bottleneck; choose the next move.

Offline, every step hands the screen a batch of points (config.screen_batch) from every
family's space. The first batch starts where the search should start: the op's starting points
for the problem's shape class (Op.starting_points: where earlier searches led), then every
family's default; the rest, and every later batch, comes from the learning search (search.py):
a surrogate per family fitted on everything screened so far, around that family's best point,
the playbook's preferred directions as a prior, and the families in order of an upper
confidence bound on their best screened speedup, each given a share of the batch. The
search is family-agnostic: a new family plugs in through the kernels registry. LLM: the same
facts in a prompt, answered as JSON and checked; its points go to the screen too (the harness
renders them), a code rewrite goes to the coder; a planner that keeps failing falls back to
offline.
"""

from __future__ import annotations

import functools
import json
import math
import random
import time
from typing import Any, Literal

from langgraph.runtime import Runtime
from langgraph.types import Command

from agents import playbook, prompts, stopping, tiers
from agents.config import Provider
from agents.context import RunContext
from agents.search import Observation, SurrogateSearch, point_key
from agents.state import OptimizeState, Plan, StopReason
from harness.results import Verdict

FAMILY_EXPLORE = 0.3
SURROGATE_SHOWN = (0.001, 10.0)  # predictions outside this are extrapolation: not shown
QUEUE_ROUNDS = 2  # points waiting to compile or be screened, in screen batches, at most


def planner(
    state: OptimizeState, runtime: Runtime[RunContext]
) -> Command[Literal["screen", "coder", "finish"]]:
    ctx = runtime.context
    if ctx.reporter.cancel_requested():  # checked again here: an LLM plan can take a while
        return _stop(state, ctx, StopReason.CANCELLED)
    notes: list[str] = []
    plan: Plan | None = None
    if ctx.config.planner is Provider.LLM and ctx.llm is not None:
        from agents.llm import LLMError, LLMErrorKind

        ctx.llm.deadline_at = time.monotonic() + stopping.search_left(state, ctx)
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
        return Command(goto="finish", update=update)
    update["plan"] = plan
    return Command(goto="coder" if plan["move"] == "rewrite" else "screen", update=update)


def offline_plan(state: OptimizeState, ctx: RunContext) -> Plan | None:
    """The next screen batch (or an LLM rewrite every other step when the coder is an LLM);
    None when nothing is left to try and nothing waits to be screened."""
    best = state.get("best")
    diagnosis = playbook.diagnose(state.get("latest_profile"), best["evaluation"] if best else None)
    if ctx.config.coder is Provider.LLM and best is not None and _planner_steps(state) % 2 == 1:
        return Plan(
            hypothesis=f"{diagnosis.evidence}: {diagnosis.advice}",
            move="rewrite",
            points=[],
            rewrite=f"{diagnosis.advice}. Keep the output identical; change only how it is computed.",
            llm_tokens=0,
            llm_cost_usd=0.0,
        )
    rng = random.Random(f"{ctx.config.seed}:{_planner_steps(state)}")
    queued = state.get("queued", [])
    taken = _taken(state)
    room = max(
        0, min(ctx.config.screen_batch, QUEUE_ROUNDS * ctx.config.screen_batch - len(queued))
    )
    points: list[dict[str, Any]] = []
    words = f"{diagnosis.evidence}: {diagnosis.advice}."

    def add(point: dict[str, Any], why: str) -> bool:
        key = _key(point["family"], point["params"])
        if len(points) >= room or key in taken:
            return False
        taken.add(key)
        # Each point carries the reason for that point: a candidate's hypothesis must name its
        # own family and change, not the batch's first one (issue 17).
        points.append({**point, "hypothesis": f"{words} {why}"})
        return True

    families = ctx.families
    first = not state.get("screened") and not queued
    started = 0
    if first:
        # Where the search starts: the measured starting points of this shape class, then
        # every family's default (Triton before CUDA C++: cheaper to build), then the search.
        started = sum(
            add(
                p,
                f"a measured starting point for this shape class ({p['family']};"
                f" kernels/ops/{ctx.op.name}/starting_points.py)",
            )
            for p in _starting_points(ctx, taken)
        )
        for name in sorted(
            families, key=lambda n: (families[n].backend != "triton", playbook.family_tier(n))
        ):
            add(
                {"family": name, "params": families[name].default(ctx.problem)},
                f"{name} at its default point (not tried yet)",
            )
    hypothesis = ""
    observations = _observations(state)
    # The machine's library: built already, so screening it costs no compile (issue 24).
    share = room if first else math.ceil(ctx.config.library_share * room)
    library = sum(
        add(p, f"{p['family']}: a library build of this machine (screened without a compile)")
        for p in _library_next(ctx, observations, taken, min(share, room - len(points)))
    )
    # Families tier two keeps contradicting send no finalists (tiers.distrusted): screening
    # more of their points wastes the batch, so they come last, after every other family.
    distrusted = tiers.distrusted(state)
    order = sorted(_choose_family(observations, families, rng), key=lambda n: n in distrusted)
    taken_params: dict[str, list[dict[str, Any]]] = {}
    while len(points) < room:
        share = max(2, math.ceil((room - len(points)) / max(1, len(order))))
        grew = False
        for name in order:
            if len(points) >= room:
                break
            family = families[name]
            space = family.space(ctx.problem)
            search = SurrogateSearch(space, functools.partial(family.check, ctx.problem), rng=rng)
            obs = observations.get(name, [])
            anchor = _best_point(obs) or _start_of(ctx, name) or family.default(ctx.problem)
            prefs = playbook.preferences(diagnosis.bottleneck, list(space.choices))
            exclude = [
                *taken_params.setdefault(name, _taken_params(state, name)),
                *(q["params"] for q in points if q["family"] == name),
            ]
            proposed = search.propose(
                obs, k=min(share, room - len(points)), anchor=anchor, exclude=exclude, prior=prefs
            )
            for params in proposed:
                predicted = math.exp(search.predict(obs, params)) if obs else None
                guess = _surrogate_guess(predicted)
                why = f"{name}: {_describe_change(anchor, params)}{guess}"
                if add({"family": name, "params": params}, why):
                    grew = True
                    hypothesis = hypothesis or why
        if not grew:
            break
    if not points and not queued:
        return None
    if started:
        hypothesis = (
            f"screen {len(points)} points: the {started} measured starting points for this shape"
            f" class (kernels/ops/{ctx.op.name}/starting_points.py), every family's default,"
            f"{f' {library} built library points,' if library else ''}"
            " then the search's picks from every family"
        )
    elif library and len(points) == library:
        hypothesis = f"screen {library} more built library points (no compile)"
    elif points:
        hypothesis = f"screen {len(points)} more points; first: {hypothesis or 'the search picks'}"
    else:
        hypothesis = f"screen the {len(queued)} points still compiling"
    return Plan(
        hypothesis=f"{words} {hypothesis}",
        move="screen",
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
                history=prompts.format_history(list(history)) + _screened_text(state),
            ),
        },
    ]
    before_tokens, before_cost = ctx.llm.spent.tokens, ctx.llm.spent.cost_usd
    seen = _taken(state)

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
        move="screen",  # the harness renders the points: trusted code, screened in batches
        points=points,
        rewrite="",
        llm_tokens=0,
        llm_cost_usd=0.0,
    )


def _starting_points(ctx: RunContext, taken: set[str]) -> list[dict[str, Any]]:
    """The op's starting points for this problem, best first: completed from the family's
    default, valid, untried, and only of the families this evaluator can run."""
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
        if why is None and _key(name, params) not in taken:
            points.append({"family": name, "params": params})
    return points


def _library_next(
    ctx: RunContext, observations: dict[str, list[Observation]], taken: set[str], k: int
) -> list[dict[str, Any]]:
    """The next `k` library points not screened yet: in a family the screen has seen, the
    surrogate's most promising first; otherwise nearest the family's default."""
    left = [p for p in ctx.library if _key(p["family"], p["params"]) not in taken]
    if k <= 0 or not left:
        return []
    predicted: dict[int, float] = {}
    for name in {p["family"] for p in left} & set(observations):
        family = ctx.families[name]
        search = SurrogateSearch(
            family.space(ctx.problem),
            functools.partial(family.check, ctx.problem),
            rng=random.Random(0),  # predict() draws nothing
        )
        for i, p in enumerate(left):
            if p["family"] == name:
                predicted[i] = search.predict(observations[name], p["params"])
    order = sorted(range(len(left)), key=lambda i: (-predicted.get(i, -math.inf), i))
    return [left[i] for i in order[:k]]


def _start_of(ctx: RunContext, family: str) -> dict[str, Any] | None:
    """The family's first starting point for this shape class: the search's anchor before any
    of its points was screened."""
    for name, partial in ctx.op.starting_points(ctx.problem):
        if name == family and name in ctx.families:
            return {**ctx.families[name].default(ctx.problem), **partial}
    return None


def _observations(state: OptimizeState) -> dict[str, list[Observation]]:
    """Per family: every screened point (log screened speedup; None when it failed) and every
    full verification that failed (a render the screen passed but the full protocol did not)."""
    out: dict[str, list[Observation]] = {}
    for s in state.get("screened", {}).values():
        if s["verdict"] == Verdict.TIMEOUT.value:
            continue  # not an answer about the point
        value = (
            math.log(s["speedup"])
            if s["verdict"] == Verdict.PASSED.value and s["speedup"]
            else None
        )
        out.setdefault(s["family"], []).append(Observation(s["params"], value))
    for r in state.get("history", []):
        if r["family"] and r["verdict"] not in ("kept", "reverted", "error"):
            out.setdefault(r["family"], []).append(Observation(r["params"], None))
    return out


def _screened_text(state: OptimizeState, limit: int = 10) -> str:
    """The screen's fastest points so far, for the LLM's prompt (tier one: a ranking only)."""
    passed = [s for s in state.get("screened", {}).values() if s["speedup"]]
    passed.sort(key=lambda s: s["speedup"] or 0.0, reverse=True)
    lines = [
        f"screened {s['family']} {json.dumps(s['params'], default=str)} -> "
        f"{s['speedup']:.3f}x GPU time vs the baseline (not verified)"
        for s in passed[:limit]
    ]
    return ("\n" + "\n".join(lines)) if lines else ""


def _taken_params(state: OptimizeState, family: str) -> list[dict[str, Any]]:
    """The family's points already screened, queued or judged (the search skips them)."""
    out = [s["params"] for s in state.get("screened", {}).values() if s["family"] == family]
    out += [q["params"] for q in state.get("queued", []) if q["family"] == family]
    out += [r["params"] for r in state.get("history", []) if r["family"] == family]
    return out


def _taken(state: OptimizeState) -> set[str]:
    taken = set(state.get("screened", {}))
    taken |= {_key(q["family"], q["params"]) for q in state.get("queued", [])}
    taken |= {_key(r["family"], r["params"]) for r in state.get("history", []) if r["family"]}
    return taken


def _choose_family(
    observations: dict[str, list[Observation]], families: dict[str, Any], rng: random.Random
) -> list[str]:
    """Families by upper confidence bound on their best screened log-speedup; best first."""
    scores = []
    total = max(1, sum(len(o) for o in observations.values()))
    for name in families:
        obs = observations.get(name, [])
        results = [o.log_speedup for o in obs if o.log_speedup is not None]
        best = max(results) if results else -1.0
        bonus = FAMILY_EXPLORE * math.sqrt(math.log(total + 1) / (len(obs) + 1))
        scores.append((best + bonus, rng.random(), name))
    return [name for *_, name in sorted(scores, reverse=True)]


def _best_point(observations: list[Observation]) -> dict[str, Any] | None:
    scored = [o for o in observations if o.log_speedup is not None]
    return dict(max(scored, key=lambda o: o.log_speedup or 0.0).params) if scored else None


def _key(family: str | None, params: dict[str, Any]) -> str:
    """The same text as harness.screen.ScreenPoint.key: one key per (family, point)."""
    return f"{family}:{point_key(params)}"


def _surrogate_guess(predicted: float | None) -> str:
    """The surrogate's guess for a point, in the hypothesis only while it is a believable
    speedup: far from its data it extrapolates ("surrogate predicts 3.66e+03x" on a CPU run,
    issue 27), and a page must not print that as a number."""
    if predicted is None or not SURROGATE_SHOWN[0] <= predicted <= SURROGATE_SHOWN[1]:
        return ""
    return f"; surrogate predicts {predicted:.3g}x on the screen"


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
) -> Command[Literal["screen", "coder", "finish"]]:
    return Command(
        goto="finish",
        update={"stop_reason": reason.value, "elapsed_s": ctx.elapsed(), **_spent(ctx)},
    )
