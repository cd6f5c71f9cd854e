"""Reads about jobs, always scoped to what the user may see (membership of the job's team),
and the domain rules every reader shares: what an interpreter result is, what is implausible,
what may be ranked, which kernel is a job's winner, what a download ships, and how much GPU
time a task may spend.

The rules are applied once, when an iteration is recorded (services.iteration_record writes
result_facts() into Iteration.interpreter/implausible/ranked); everything else reads those
columns: the job page and its events, the API, the leaderboards, the downloads and a model
job's end-to-end check.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import BooleanField, Count, ExpressionWrapper, F, Q, QuerySet

from webapp.jobs.models import Iteration, Job, ModelRun, Task

# --- Domain rules -----------------------------------------------------------------------------

# Verdicts whose candidate became the task's best: the starting point, then every keep.
BEST_VERDICTS = (Iteration.Verdict.KEPT, Iteration.Verdict.BASELINE)


@dataclass(frozen=True)
class ResultFacts:
    """What one recorded result counts as, decided here and nowhere else."""

    interpreter: bool  # timed in Triton's CPU interpreter: correctness only, never a speed
    implausible: bool  # faster than the device's measured roof allows
    ranked: bool  # a verified win on a GPU: ranked, downloadable, substituted into a model


def result_facts(
    *,
    verdict: str,
    speedup: float | None,
    source: str,
    evaluation: dict[str, Any] | None,
    beats_baselines: bool,
    final_evaluation: dict[str, Any] | None = None,
) -> ResultFacts:
    """A result is ranked only if the judge made it the best (so it passed every correctness
    stage and was not flagged), it is plausible, it was timed on a GPU, and it beats every
    baseline it was timed against beyond noise. Never ship a loss: a first correct candidate
    is kept however slow it is, and that alone makes nothing a winner.

    `beats_baselines` is that last fact as the harness decided it (harness/judge/wins.py, the one
    rule) for the measurement: the worker passes it with the result (Iteration.beats_baselines);
    the web app may not import the harness, so it never recomputes it from the timings.

    When the run re-evaluated its best with the full protocol (`final_evaluation`: more
    shapes, more samples, every baseline), that run decides: it must have passed too.
    """
    final_failed = final_evaluation is not None and final_evaluation.get("verdict") != "passed"
    evaluation = final_evaluation or evaluation or {}
    timings = _dict(evaluation.get("timings"))
    device = _dict(evaluation.get("device"))
    interpreter = timings.get("regime") == "interpreter" or device.get("kind") == "interpreter"
    implausible = bool(evaluation.get("implausible"))
    ranked = (
        verdict in BEST_VERDICTS
        and not final_failed
        and speedup is not None
        and bool(source)
        and not implausible
        and not interpreter
        and device.get("kind") == "cuda"
        and beats_baselines
    )
    return ResultFacts(interpreter=interpreter, implausible=implausible, ranked=ranked)


@dataclass(frozen=True)
class BaselineSpeedup:
    baseline: str  # the harness's name: "torch", "compile", "cublaslt"
    speedup: float


def best_baseline(evaluation: dict[str, Any] | None) -> BaselineSpeedup | None:
    """The fastest baseline the result was timed against, and the speedup over it (the number
    that says what a user gains over the best they would otherwise use)."""
    speedups = _dict(_dict((evaluation or {}).get("timings")).get("speedups"))
    timed = {name: s for name, s in speedups.items() if _number(s)}
    if not timed:
        return None
    name = min(timed, key=timed.__getitem__)
    return BaselineSpeedup(baseline=name, speedup=float(timed[name]))


def fastest_speedup(evaluation: dict[str, Any] | None) -> float | None:
    """Iteration.fastest_speedup: the speedup over the fastest baseline timed, else None."""
    best = best_baseline(evaluation)
    return best.speedup if best else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def ranked_iterations(*, jobs: QuerySet[Job]) -> QuerySet[Iteration]:
    return Iteration.objects.filter(job__in=jobs, ranked=True)


@dataclass(frozen=True)
class Winner:
    """A task's best ranked iteration: the kernel a download ships and a model job uses."""

    task: Task
    iteration: Iteration


def job_winners(*, job_id: uuid.UUID | str) -> list[Winner]:
    """Per task, the ranked iteration fastest over its fastest baseline (the earliest on a
    tie), in problem order; tasks with none are served by PyTorch. One query."""
    rows = (
        Iteration.objects.filter(job_id=job_id, ranked=True)
        .select_related("task__problem", "job__team")
        .order_by(F("fastest_speedup").desc(nulls_last=True), "seq")
    )
    best: dict[int, Iteration] = {}
    for it in rows:
        best.setdefault(it.task_id, it)
    ordered = sorted(best.values(), key=lambda it: it.task.problem.position)
    return [Winner(task=it.task, iteration=it) for it in ordered]


def _model_end_to_end(job_id: uuid.UUID | str) -> dict[str, Any] | None:
    """A model job's end-to-end result ({} until its check has run); None for other jobs."""
    row = Job.objects.filter(id=job_id).values_list("kind", "model_run__end_to_end").first()
    if row is None or row[0] != Job.Kind.MODEL:
        return None
    return _dict(row[1])


def model_unbeaten(*, job_id: uuid.UUID | str) -> bool:
    """A model job whose end-to-end check has not found the model with its kernels verified
    faster than its best baseline (eager, CUDA graphs, torch.compile: harness.model.verify's
    verdict), or has not run yet. Its kernels exist to replace PyTorch ops inside that model,
    so none of them ships: never ship a loss."""
    e2e = _model_end_to_end(job_id)
    # A check with rewrites (changes to the model's code that the user makes) judged the
    # kernels alone, as the package runs them; one recorded before those has only "faster".
    return e2e is not None and not e2e.get("package_faster", e2e.get("faster"))


def model_left_out(*, job_id: uuid.UUID | str) -> set[str]:
    """Problem keys whose kernel a model job's end-to-end check left out: the model ran
    slower with it than without it (harness.model.verify's ablation)."""
    return set(_dict(_model_end_to_end(job_id)).get("left_out") or ())


LEFT_OUT_MESSAGE = (
    "The model ran slower with this kernel than without it in its end-to-end check (timed "
    "with every other kernel in place), so it was left out of the model and of the package."
)


def kernel_ships(*, job_id: uuid.UUID | str, problem_key: str) -> bool:
    """A job's verified win on this problem may be downloaded: never for a model job the
    kernels did not make faster end to end, nor for a kernel that model ran slower with."""
    if model_unbeaten(job_id=job_id):
        return False
    return problem_key not in model_left_out(job_id=job_id)


def package_winners(*, job_id: uuid.UUID | str) -> list[Winner]:
    """What a download of the job ships (the pages and the API): its winners, and a model
    job's only once the model with them beat its best baseline end to end, less any kernel
    the model ran slower with. [] means no package; no_winner_message says why."""
    if model_unbeaten(job_id=job_id):
        return []
    left_out = model_left_out(job_id=job_id)
    return [w for w in job_winners(job_id=job_id) if w.task.problem.key not in left_out]


def job_has_winner(*, job_id: uuid.UUID | str) -> bool:
    """There is a package to download (package_winners is not empty)."""
    if model_unbeaten(job_id=job_id):
        return False
    if model_left_out(job_id=job_id):
        return bool(package_winners(job_id=job_id))
    return Iteration.objects.filter(job_id=job_id, ranked=True).exists()


def no_winner_reasons(*, job_id: uuid.UUID | str) -> dict[str, str]:
    """Problem key -> why it has no winner (PyTorch serves it), for each problem without one."""
    best: dict[str, Iteration] = {}
    rows = (
        Iteration.objects.filter(job_id=job_id, verdict__in=BEST_VERDICTS)
        .select_related("task__problem")
        .defer("source", "profile", "params")
        .order_by("-speedup", "seq")
    )
    for it in rows:
        best.setdefault(it.task.problem.key, it)
    reasons = {}
    for task in Task.objects.filter(job_id=job_id).select_related("problem"):
        key = task.problem.key
        it = best.get(key)
        if it is not None and it.ranked:
            continue
        reasons[key] = why_not_ranked(it)
    return reasons


def why_not_ranked(it: Iteration | None) -> str:
    """Why a task's best kept attempt is no winner, in words (None: nothing was kept)."""
    if it is None:
        return "no correct kernel was kept"
    if it.interpreter:
        return (
            "timed only in Triton's CPU interpreter, which checks correctness and says nothing "
            "about GPU speed"
        )
    if it.implausible:
        return "its timing was faster than the device's roof allows (flagged implausible)"
    if it.final_evaluation is not None and it.final_evaluation.get("verdict") != "passed":
        return "it failed its final verification (the full protocol)"
    evaluation = it.measurement
    device = _dict(evaluation.get("device"))
    if device.get("kind") != "cuda":
        return "not timed on a GPU"
    best = best_baseline(evaluation)
    regime = _dict(evaluation.get("timings")).get("regime", "")
    if best is None:
        return "not timed against a baseline"
    # Slower is said as slower: "(slower, or within noise)" left a 0.18x reader guessing.
    how = "slower than" if best.speedup < 1.0 else "not verified faster than (within noise)"
    return (
        f"best kept kernel {best.speedup:.2f}x vs {best.baseline} on {device.get('name', '')} "
        f"({regime} timing): {how} {best.baseline}, the fastest baseline"
    )


def no_winner_message(*, job_id: uuid.UUID | str) -> str:
    """Why a job whose kernels were kept has no winner, in words for its page and the API;
    "" while nothing was kept (there is nothing to explain yet)."""
    if not Iteration.objects.filter(job_id=job_id, verdict__in=BEST_VERDICTS).exists():
        return ""
    e2e = _model_end_to_end(job_id)
    if e2e is not None and Iteration.objects.filter(job_id=job_id, ranked=True).exists():
        if not e2e:
            return (
                "Kernels of this model were verified faster on a GPU, but a model job's kernels "
                "ship only once the model with them is verified faster end to end than its best "
                "baseline (eager, CUDA graphs, torch.compile), and that check has not run to the "
                "end: there is nothing to download."
            )
        return (
            "Nothing beats the best baseline: the model with its kernels was not verified faster "
            "end to end than the best way to run it without them (eager, CUDA graphs, "
            "torch.compile), so there is nothing to download and PyTorch runs the model "
            "unchanged. The End to end section shows every way it ran."
        )
    return (
        "No kernel of this job was verified faster than PyTorch on a GPU, so there is nothing "
        "to download: PyTorch stays the fastest choice for these shapes. (Timings from Triton's "
        "CPU interpreter check correctness only and never count.)"
    )


def task_budget_s(*, task_id: int) -> float:
    """The GPU seconds a task may spend (workers/agent.py caps the agent with them): a model
    job's Amdahl plan funds each problem by its expected gain; other jobs split their budget
    evenly over their tasks."""
    task = Task.objects.select_related("problem", "job").get(id=task_id)
    plan = ModelRun.objects.filter(job_id=task.job_id).values_list("plan", flat=True).first() or {}
    for item in plan.get("items", []):
        if item["key"] == task.problem.key:
            return float(item["budget_s"])
    n_tasks = Task.objects.filter(job_id=task.job_id).count() or 1
    return task.job.gpu_minutes * 60.0 / n_tasks


# --- Jobs, as the pages and the API read them ---------------------------------------------------


def jobs_visible_to(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Job]:
    if not user.is_authenticated:
        return Job.objects.none()
    return Job.objects.filter(team__memberships__user=user)


def job_list_for_user(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Job]:
    return (
        jobs_visible_to(user=user)
        .select_related("team")
        .annotate(problem_count=Count("problems", distinct=True))
        .order_by("-created_at")
    )


def job_get_for_user(
    *, user: AbstractBaseUser | AnonymousUser, job_id: uuid.UUID | str
) -> Job | None:
    """The job if the user is a member of its team, else None (the caller answers 404)."""
    return jobs_visible_to(user=user).select_related("team", "created_by").filter(id=job_id).first()


def iterations_after(
    *, job_id: uuid.UUID | str, after_seq: int, limit: int = 1000
) -> list[dict[str, Any]]:
    """Events with seq > after_seq, in order: what a (re)connecting browser has not seen."""
    rows = (
        Iteration.objects.filter(job_id=job_id, seq__gt=after_seq)
        .select_related("task__problem")
        # Events never carry the large fields: reading them made a 1,000-event backfill slow.
        .defer("source", "evaluation", "final_evaluation", "params", "profile")
        .annotate(profile_present=ExpressionWrapper(Q(profile__isnull=False), BooleanField()))
        .order_by("seq")[:limit]
    )
    return [iteration_event(row) for row in rows]


def iteration_event(it: Iteration) -> dict[str, Any]:
    """The browser's view of one iteration; sources and profiles are fetched by id, not pushed."""
    return {
        "seq": it.seq,
        "task": it.task_id,
        "problem": it.task.problem.key,
        "index": it.index,
        "parent": it.parent,
        "verdict": it.verdict,
        "verdict_label": Iteration.Verdict(it.verdict).label,
        "hypothesis": it.hypothesis,
        "reason": it.reason,
        "candidate_id": it.candidate_id,
        "speedup": it.speedup,
        "best_speedup": it.best_speedup,
        "fastest_speedup": it.fastest_speedup,  # over the fastest baseline: the headline
        # Triton CPU-interpreter timings check correctness only; the page must not show their
        # ratios as speedups.
        "interpreter": it.interpreter,
        "ranked": it.ranked,
        "elapsed_s": round(it.elapsed_s, 3),
        "has_profile": _has_profile(it),
        # For the dashboard's live chart and budget meters (issue 7).
        "at": it.created_at.isoformat(),
        "gpu_s": it.gpu_s,
        "llm_cost_usd": it.llm_cost_usd,
    }


def _has_profile(it: Iteration) -> bool:
    present = getattr(it, "profile_present", None)  # annotated where the JSON is deferred
    return it.profile is not None if present is None else present


# --- Model jobs -------------------------------------------------------------------------------


def model_run_for_job(*, job_id: uuid.UUID | str) -> ModelRun | None:
    return ModelRun.objects.filter(job_id=job_id).first()


@dataclass(frozen=True)
class WayRow:
    """One way the model ran in the end-to-end check (harness.model.verify's variants)."""

    name: str
    label: str
    side: str  # "baseline": PyTorch alone; "ours": with the kernels substituted
    offline_us: float | None  # median forward, back to back
    server_us: float | None  # median forward, one call at a time (GPU only)
    compile_s: float | None
    ok: bool  # outputs within tolerance of eager PyTorch's
    error: str
    vs_best_baseline: float | None  # best baseline's median / this one's
    best: bool  # the best of its side


@dataclass(frozen=True)
class KernelEffect:
    """One kernel's own effect on the model (harness.model.child._ablate): the model's time
    with every kernel against with all but this one. Shipped only if not slower with it."""

    key: str
    with_us: float
    without_us: float
    effect: float  # without / with: > 1, the model is faster with this kernel
    effect_ci: list[float]
    kept: bool
    rewrite: bool = False  # a change to the model's code (Rewrite below), not a kernel


@dataclass(frozen=True)
class Rewrite:
    """A site where the op's own PyTorch call does less than the model's code (SDPA grouping
    the k/v heads that the model repeated for it): a change the user makes to their code,
    which the package cannot make, with its measured effect on the model."""

    key: str
    where: str  # the module, as the model names it
    saves: str
    effect: float | None  # the ablation's: the model with it against without it
    effect_ci: list[float] | None


@dataclass(frozen=True)
class PackageAlone:
    """With rewrites: the model with the kernels alone, as the package runs it, against the
    best baseline. Only this decides whether a kernel ships."""

    speedup: float
    speedup_ci: list[float]
    us: float
    faster: bool


@dataclass(frozen=True)
class EndToEndView:
    """A model's end-to-end check as the page and the package show it. Its timing ran inside
    the model's own process (the user's code: harness/README.md, the trust boundary), so it is
    labelled so; team leaderboards rank kernels the harness judged on their own."""

    rows: list[WayRow]
    best_baseline: WayRow | None
    best_ours: WayRow | None
    speedup: float | None
    speedup_ci: list[float] | None
    faster: bool  # verified faster than the best baseline: the only case that ships
    message: str
    device_name: str
    chart: dict[str, Any]
    kernel_effects: list[KernelEffect]
    kernel_split: dict[str, Any] | None  # the kernel_split() chart's data
    rewrites: list[Rewrite] = field(default_factory=list)
    package: PackageAlone | None = None  # None: no rewrites (the package is best_ours)
    provenance: str = (
        "Measured inside the model's own process, with its own code (the harness cannot make "
        "that tamper-proof): each kernel in it was judged on its own, and team leaderboards "
        "rank those kernels, not this number."
    )


# The order the page lists the ways in: baselines first, each next to its counterpart with the
# kernels (JSONB keeps no key order, so the table cannot take the stored one).
WAYS = (
    "eager",
    "cuda_graphs",
    "compile",
    "compile_max_autotune",
    "compile_cuda_graphs",
    "ours",
    "ours_cuda_graphs",
    "ours_compile",
    "ours_compile_cuda_graphs",
)


def without_package(message: str) -> str:
    """The harness ends its no-win sentences with what a package would do ("... and the package
    replaces no PyTorch op"); a job without a win has no package (package_winners), so the page
    says there is nothing to download instead of naming one (issue 27)."""
    return message.replace(
        " and the package replaces no PyTorch op.", ": there is no package to download."
    )


SPLIT_KERNELS = 8  # each way's slowest kernels drawn on their own; the rest as one


def kernel_split(e2e: dict[str, Any], ways: dict[str, WayRow]) -> dict[str, Any] | None:
    """Where one forward's GPU time goes in the best baseline and in the best way with the
    kernels (harness.model.verify's kernel tables): one stacked bar each, a segment per kernel
    (each way's slowest SPLIT_KERNELS, the rest together), for the chart under the timings.
    None when the check listed no kernels (recorded before it did, or no win to compare)."""
    tables = _dict(e2e.get("kernels"))
    names = [n for n in (e2e.get("best_baseline"), e2e.get("best_ours")) if n in tables]
    if len(names) != 2 or not all(tables[n] for n in names):
        return None
    shown: list[str] = []
    for name in names:
        for row in tables[name][:SPLIT_KERNELS]:
            if row["name"] not in shown:
                shown.append(row["name"])
    segments, labels = [], []
    for kernel in shown:
        us = [sum(r["us_per_step"] for r in tables[n] if r["name"] == kernel) for n in names]
        label = _short_kernel(kernel)
        labels.append(label)
        if labels.count(label) > 1:  # two CUTLASS kernels share a long prefix
            label = f"{label} ({labels.count(label)})"
        segments.append({"name": kernel, "label": label, "us": us})
    rest = [sum(r["us_per_step"] for r in tables[n] if r["name"] not in shown) for n in names]
    segments.append({"name": "every other kernel", "label": "other kernels", "us": rest})
    return {
        "ways": [ways[n].label if n in ways else n for n in names],
        "segments": [{**s, "us": [round(u, 2) for u in s["us"]]} for s in segments],
    }


def _package_alone(e2e: dict[str, Any]) -> PackageAlone | None:
    p = e2e.get("package") or {}
    if not (p.get("speedup") and p.get("speedup_ci") and p.get("us")):
        return None  # no kernel to time alone
    return PackageAlone(p["speedup"], p["speedup_ci"], p["us"], bool(e2e.get("package_faster")))


def _short_kernel(name: str) -> str:
    """A kernel's name short enough for a legend (the hover shows all of it)."""
    name = name.removeprefix("void ")
    if "cutlass" in name[:40]:  # a template's (or mangled) name: what it is, not its text
        return "CUTLASS kernel"
    return name if len(name) <= 48 else name[:47] + "…"


def end_to_end_view(run: ModelRun) -> EndToEndView | None:
    """The end-to-end table and chart: every baseline and every way with the kernels, their
    compile times, and how each compares to the best baseline. None for a run with no check
    yet (or one recorded before the baselines were timed)."""
    e2e = run.end_to_end or {}
    variants = e2e.get("variants")
    if not variants:
        return None
    regime = "offline" if any(v.get("offline") for v in variants.values()) else "interpreter"
    best_us = e2e.get("baseline_us")
    rows = []
    order = sorted(variants, key=lambda n: (WAYS.index(n) if n in WAYS else len(WAYS), n))
    for name in order:
        v = variants[name]
        median = (v.get(regime) or {}).get("median_us")
        rows.append(
            WayRow(
                name=name,
                label=v.get("label", name),
                side=v.get("side", ""),
                offline_us=median,
                server_us=(v.get("server") or {}).get("median_us"),
                compile_s=v.get("compile_s"),
                ok=bool(v.get("ok")),
                error=(v.get("error") or "")[-300:],
                vs_best_baseline=best_us / median if best_us and median else None,
                best=name in (e2e.get("best_baseline"), e2e.get("best_ours")),
            )
        )
    by_name = {r.name: r for r in rows}
    timed = [r for r in rows if r.offline_us]
    rewrites = e2e.get("rewrites") or []
    rewritten = {w["key"] for w in rewrites}
    effects = {a["key"]: a for a in e2e.get("ablation") or ()}
    return EndToEndView(
        rows=rows,
        best_baseline=by_name.get(e2e.get("best_baseline")),
        best_ours=by_name.get(e2e.get("best_ours")),
        speedup=e2e.get("speedup"),
        speedup_ci=e2e.get("speedup_ci"),
        faster=bool(e2e.get("faster")),
        message=without_package(e2e.get("message", "")),
        device_name=e2e.get("device_name", ""),
        kernel_effects=[
            KernelEffect(**a, rewrite=a["key"] in rewritten) for a in e2e.get("ablation") or ()
        ],
        kernel_split=kernel_split(e2e, by_name),
        rewrites=[
            Rewrite(
                key=w["key"],
                where=", ".join(w["where"]) or w["key"],
                saves=w["saves"],
                effect=effects.get(w["key"], {}).get("effect"),
                effect_ci=effects.get(w["key"], {}).get("effect_ci"),
            )
            for w in rewrites
        ],
        package=_package_alone(e2e) if rewrites else None,
        chart={
            "labels": [r.label for r in timed],
            "us": [round(r.offline_us, 2) for r in timed],
            "side": [r.side for r in timed],
            "unit": "µs per forward" if regime == "offline" else "CPU µs per forward",
        },
    )
