"""Reads for the dashboard pages. Each page costs a fixed number of queries, whatever the history.

Team isolation comes from webapp.jobs.selectors.jobs_visible_to; leaderboard eligibility is
Iteration.ranked (webapp.jobs.selectors.result_facts: a verified win on a GPU). The pages and
the API read the same leaderboard table (models.BoardEntry) through leaderboard_groups().
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.paginator import Page, Paginator
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    FloatField,
    IntegerField,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce

from webapp.accounts.models import Team
from webapp.dashboard.models import BoardEntry
from webapp.jobs.models import Iteration, Job, ModelRun, Problem, Task
from webapp.jobs.queue import CPU_QUEUE
from webapp.jobs.selectors import BEST_VERDICTS, best_baseline, jobs_visible_to

JOBS_PER_PAGE = 25
GROUPS_PER_PAGE = 20

FAILED_VERDICTS = (
    Iteration.Verdict.COMPILE_FAILED,
    Iteration.Verdict.INCORRECT,
    Iteration.Verdict.TIMEOUT,
    Iteration.Verdict.CRASH,
    Iteration.Verdict.ERROR,
)


# --- Jobs list --------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobFilters:
    team: str = ""  # team slug
    op: str = ""
    status: str = ""


def job_list_page(
    *, user: AbstractBaseUser | AnonymousUser, filters: JobFilters, page: int | str = 1
) -> Page:
    """Jobs the user may see, newest first, with best kept speedup and the GPU queue they ran on.

    Per-job numbers are correlated subqueries, so a page is one query (plus the count) however
    many iterations the jobs hold.
    """
    jobs = jobs_visible_to(user=user)
    if filters.team:
        jobs = jobs.filter(team__slug=filters.team)
    if filters.status:
        jobs = jobs.filter(status=filters.status)
    if filters.op:
        jobs = jobs.filter(id__in=Problem.objects.filter(op=filters.op).values("job_id"))
    # The best is a GPU measurement; a job with only CPU-interpreter wins says "interp." instead.
    kept = Iteration.objects.filter(job=OuterRef("pk"), verdict=Iteration.Verdict.KEPT)
    best = (
        kept.filter(interpreter=False)
        .order_by()
        .values("job")
        .annotate(best=Max("fastest_speedup"))
        .values("best")
    )
    problems = (
        Problem.objects.filter(job=OuterRef("pk"))
        .order_by()
        .values("job")
        .annotate(n=Count("id"))
        .values("n")
    )
    queue = Task.objects.filter(job=OuterRef("pk")).order_by("id").values("queue")[:1]
    jobs = (
        jobs.select_related("team")
        .annotate(
            best_speedup=Subquery(best, output_field=FloatField()),
            problem_count=Coalesce(Subquery(problems, output_field=IntegerField()), Value(0)),
            queue=Subquery(queue),
        )
        .annotate(
            best_is_interpreter=ExpressionWrapper(
                Q(best_speedup__isnull=True) & Exists(kept.filter(interpreter=True)),
                output_field=BooleanField(),
            )
        )
        .order_by("-created_at")
    )
    return Paginator(jobs, JOBS_PER_PAGE).get_page(page)


def job_filter_choices(*, user: AbstractBaseUser | AnonymousUser) -> dict[str, list]:
    visible = jobs_visible_to(user=user)
    teams = visible.order_by("team__name").values_list("team__slug", "team__name").distinct()
    ops = (
        Problem.objects.filter(job__in=visible).order_by("op").values_list("op", flat=True)
    ).distinct()
    return {"teams": list(teams), "ops": list(ops), "statuses": list(Job.Status.choices)}


# --- Job page ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    gpu_s: float
    gpu_budget_s: float
    llm_cost_usd: float
    llm_budget_usd: float
    iterations: int
    on_cpu: bool = False  # every task runs on the CPU queue: its worker time is no GPU time

    @property
    def time_label(self) -> str:
        return "CPU time" if self.on_cpu else "GPU time"

    @property
    def gpu_pct(self) -> float:
        return min(100.0, 100.0 * self.gpu_s / self.gpu_budget_s) if self.gpu_budget_s else 0.0

    @property
    def llm_pct(self) -> float:
        if not self.llm_budget_usd:
            return 0.0
        return min(100.0, 100.0 * self.llm_cost_usd / self.llm_budget_usd)


def job_budget(*, job: Job) -> Budget:
    """Spent against the job's budget (Job.gpu_minutes, set at submission)."""
    used = Iteration.objects.filter(job=job).aggregate(
        gpu=Sum("gpu_s"), llm=Sum("llm_cost_usd"), n=Count("id")
    )
    queues = Task.objects.filter(job=job).aggregate(
        n=Count("id"), cpu=Count("id", filter=Q(queue=CPU_QUEUE))
    )
    if queues["n"]:
        on_cpu = queues["cpu"] == queues["n"]
    else:  # a model job before (or without) its tasks: the queue it was sent to says
        on_cpu = ModelRun.objects.filter(job=job, queue=CPU_QUEUE).exists()
    return Budget(
        gpu_s=used["gpu"] or 0.0,
        gpu_budget_s=60.0 * job.gpu_minutes,
        llm_cost_usd=used["llm"] or 0.0,
        llm_budget_usd=settings.KF_JOB_LLM_BUDGET_USD,
        iterations=used["n"],
        on_cpu=on_cpu,
    )


def job_current_hypothesis(*, job: Job) -> Iteration | None:
    return (
        Iteration.objects.filter(job=job)
        .exclude(hypothesis="")
        .only("seq", "hypothesis", "verdict", "task_id")
        .order_by("-seq")
        .first()
    )


# --- Iteration page ---------------------------------------------------------------------------


def iteration_get(*, job: Job, seq: int) -> Iteration | None:
    return (
        Iteration.objects.filter(job=job, seq=seq)
        .select_related("task__problem", "job__team")
        .first()
    )


def iteration_parent(*, iteration: Iteration) -> Iteration | None:
    if iteration.parent is None:
        return None
    return (
        Iteration.objects.filter(task_id=iteration.task_id, index=iteration.parent)
        .select_related("task__problem")
        .first()
    )


@dataclass(frozen=True)
class MetricRow:
    name: str
    label: str
    value: float | None
    parent: float | None
    better: str  # "higher", "lower" or "" (neither is better)

    @property
    def delta(self) -> float | None:
        if self.value is None or self.parent is None:
            return None
        return self.value - self.parent

    @property
    def delta_pct(self) -> float | None:
        if self.delta is None or not self.parent:
            return None
        return 100.0 * self.delta / abs(self.parent)

    @property
    def tone(self) -> str:
        """good / bad / "" for the delta cell, by this metric's better direction."""
        pct = self.delta_pct
        if pct is None or abs(pct) < 2.0 or not self.better:
            return ""
        improved = pct > 0 if self.better == "higher" else pct < 0
        return "good" if improved else "bad"


# short name (harness/ncu.py's table) -> label, which direction is better
NCU_METRICS: tuple[tuple[str, str, str], ...] = (
    ("duration_ns", "Kernel time (ns)", "lower"),
    ("sm_pct", "SM throughput (% of peak)", "higher"),
    ("memory_pct", "Memory throughput (% of peak)", ""),
    ("dram_pct", "DRAM throughput (% of peak)", ""),
    ("tensor_pipe_pct", "Tensor pipe busy (%)", "higher"),
    ("l2_hit_pct", "L2 hit rate (%)", "higher"),
    ("l1_hit_pct", "L1 hit rate (%)", "higher"),
    ("achieved_occupancy_pct", "Achieved occupancy (%)", "higher"),
    ("theoretical_occupancy_pct", "Theoretical occupancy (%)", "higher"),
    ("registers_per_thread", "Registers per thread", "lower"),
    ("shared_mem_dynamic_bytes", "Dynamic shared memory (B)", ""),
    ("block_size", "Block size", ""),
    ("grid_size", "Grid size", ""),
    ("waves_per_sm", "Waves per SM", ""),
    ("issue_active_pct", "Issue slots busy (%)", "higher"),
    ("eligible_warps_per_cycle", "Eligible warps per cycle", "higher"),
    ("dram_read_bytes", "DRAM bytes read", "lower"),
    ("dram_write_bytes", "DRAM bytes written", "lower"),
    ("spill_requests", "Local spill requests", "lower"),
)


def metric_rows(profile: dict | None, parent_profile: dict | None) -> list[MetricRow]:
    ours = (profile or {}).get("metrics") or {}
    theirs = (parent_profile or {}).get("metrics") or {}
    rows = []
    for name, label, better in NCU_METRICS:
        if ours.get(name) is None and theirs.get(name) is None:
            continue
        rows.append(MetricRow(name, label, ours.get(name), theirs.get(name), better))
    return rows


@dataclass(frozen=True)
class TimingRow:
    name: str  # "candidate" or a baseline's name
    median_us: float | None
    iqr_us: float | None
    min_us: float | None
    samples: int | None
    speedup: float | None  # baseline median / candidate median (None for the candidate)
    ci: tuple[float, float] | None


def timing_rows(evaluation: dict | None) -> list[TimingRow]:
    timings = (evaluation or {}).get("timings") or {}
    if not timings:
        return []

    def row(name: str, stats: dict, speedup: float | None, ci: Any) -> TimingRow:
        return TimingRow(
            name,
            stats.get("median_us"),
            stats.get("iqr_us"),
            stats.get("min_us"),
            stats.get("samples"),
            speedup,
            tuple(ci) if isinstance(ci, list | tuple) and len(ci) == 2 else None,
        )

    rows = [row("candidate", timings.get("candidate") or {}, None, None)]
    speedups = timings.get("speedups") or {}
    cis = timings.get("speedup_ci") or {}
    for name, stats in sorted((timings.get("baselines") or {}).items()):
        rows.append(row(name, stats or {}, speedups.get(name), cis.get(name)))
    return rows


def roofline(evaluation: dict | None, parent_evaluation: dict | None) -> dict | None:
    """Points (arithmetic intensity, TFLOP/s) for candidate and parent, plus the device's roofs."""
    device = (evaluation or {}).get("device") or {}
    peak_tflops, peak_gbps = device.get("peak_tflops"), device.get("peak_gbps")
    points = []
    for label, ev in (("candidate", evaluation), ("parent", parent_evaluation)):
        tflops, gbps = (ev or {}).get("tflops"), (ev or {}).get("gbps")
        if tflops and gbps:
            points.append({"label": label, "ai": tflops * 1000.0 / gbps, "tflops": tflops})
    if not points or not peak_tflops or not peak_gbps:
        return None
    return {
        "device": device.get("name", ""),
        "peak_tflops": peak_tflops,
        "peak_gbps": peak_gbps,
        "points": points,
    }


@dataclass
class IterationView:
    """Everything the iteration page (and each side of the compare page) shows."""

    iteration: Iteration
    parent: Iteration | None
    evaluation: dict = field(default_factory=dict)
    stages: list[dict] = field(default_factory=list)
    timings: list[TimingRow] = field(default_factory=list)
    metrics: list[MetricRow] = field(default_factory=list)
    roofline: dict | None = None
    interpreter: bool = False

    @property
    def has_report(self) -> bool:
        return bool((self.iteration.profile or {}).get("report_path"))


def iteration_view(*, iteration: Iteration, parent: Iteration | None) -> IterationView:
    evaluation = iteration.evaluation or {}
    parent_eval = parent.evaluation if parent else None
    return IterationView(
        iteration=iteration,
        parent=parent,
        evaluation=evaluation,
        stages=list(evaluation.get("stages") or []),
        timings=timing_rows(evaluation),
        metrics=metric_rows(iteration.profile, parent.profile if parent else None),
        roofline=roofline(evaluation, parent_eval),
        interpreter=iteration.interpreter,
    )


# --- Leaderboards -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BoardRow:
    rank: int
    team_slug: str
    team_name: str
    job_id: uuid.UUID
    job_title: str
    seq: int
    candidate_id: str
    speedup: float  # over the fastest baseline (Iteration.fastest_speedup): the headline
    baseline: str  # that baseline's name
    speedups: dict[str, float]
    pct_of_roof: float | None
    created_at: Any
    device: dict[str, Any]
    family: str


@dataclass(frozen=True)
class BoardGroup:
    problem_key: str
    op: str
    shape: list[int]
    dtype: str
    layout: str
    device: str
    entries: list[BoardRow]


@dataclass(frozen=True)
class BoardFilters:
    op: str = ""
    dtype: str = ""
    device: str = ""


def _best_per_team(jobs: QuerySet[Job], filters: BoardFilters) -> QuerySet[BoardEntry]:
    """One row per (problem key, GPU, team) among the teams of `jobs`: the team's best there."""
    rows = BoardEntry.objects.filter(team__in=jobs.values("team_id"))
    if filters.op:
        rows = rows.filter(op=filters.op)
    if filters.dtype:
        rows = rows.filter(dtype=filters.dtype)
    if filters.device:
        rows = rows.filter(device=filters.device)
    return rows


def _groups_from(rows: list[tuple], wanted: set[tuple[str, str]] | None) -> dict:
    groups: dict[tuple[str, str], list[tuple]] = {}
    for row in rows:
        key = (row[1], row[2] or "")
        if wanted is None or key in wanted:
            groups.setdefault(key, []).append(row)
    for entries in groups.values():
        entries.sort(key=lambda r: (-r[3], r[4]))
    return groups


def leaderboard_page(
    *,
    jobs: QuerySet[Job],
    filters: BoardFilters,
    page: int | str = 1,
    per_group: int = 10,
    team_slug: str = "",
) -> tuple[Page, list[BoardGroup], list[str]]:
    """Problems (op, shape, dtype, layout) x GPU, a page at a time, each with its teams ranked.

    Two queries: every (problem, GPU, team) entry of the board (narrow columns, a few per
    problem), then the displayed iterations in full.
    With `team_slug`, only groups that team leads (its wins).
    """
    groups = _board_entries(jobs, filters)
    keys = sorted(groups)
    if team_slug:
        keys = [k for k in keys if groups[k][0][5] == team_slug]
    page_obj = Paginator(keys, GROUPS_PER_PAGE).get_page(page)
    shown = {k: groups[k][:per_group] for k in page_obj.object_list}
    return page_obj, _board_groups(shown), sorted({k[1] for k in groups})


def leaderboard_groups(
    *, jobs: QuerySet[Job], filters: BoardFilters, per_group: int = 10
) -> list[BoardGroup]:
    """Every group of the board at once, as the API serves it (the pages page through them)."""
    groups = _board_entries(jobs, filters)
    return _board_groups({k: groups[k][:per_group] for k in sorted(groups)})


def _board_entries(jobs: QuerySet[Job], filters: BoardFilters) -> dict:
    best = list(
        _best_per_team(jobs, filters).values_list(
            "iteration_id", "problem_key", "device", "speedup", "iteration__seq", "team__slug"
        )
    )
    return _groups_from(best, None)


def _board_groups(shown: dict[tuple[str, str], list[tuple]]) -> list[BoardGroup]:
    ids = [row[0] for rows in shown.values() for row in rows]
    full = {
        it.id: it
        for it in Iteration.objects.filter(id__in=ids)
        .select_related("task__problem", "job__team")
        .defer("source", "profile", "params")
    }
    result = []
    for key, rows in shown.items():
        entries = []
        for rank, row in enumerate(rows, start=1):
            it = full[row[0]]
            evaluation = it.measurement
            timings = evaluation.get("timings") or {}
            entries.append(
                BoardRow(
                    rank=rank,
                    team_slug=it.job.team.slug,
                    team_name=it.job.team.name,
                    job_id=it.job_id,
                    job_title=it.job.title,
                    seq=it.seq,
                    candidate_id=it.candidate_id,
                    speedup=row[3],
                    baseline=fastest.baseline if (fastest := best_baseline(evaluation)) else "",
                    speedups=dict(sorted((timings.get("speedups") or {}).items())),
                    pct_of_roof=evaluation.get("pct_of_roof"),
                    created_at=it.created_at,
                    device=evaluation.get("device") or {},
                    family=it.family,
                )
            )
        problem = full[rows[0][0]].task.problem
        result.append(
            BoardGroup(
                problem_key=key[0],
                op=problem.op,
                shape=list(problem.shape),
                dtype=problem.dtype,
                layout=problem.layout,
                device=key[1],
                entries=entries,
            )
        )
    return result


def board_filter_choices(*, jobs: QuerySet[Job], groups_devices: list[str]) -> dict[str, list[str]]:
    problems = Problem.objects.filter(job__in=jobs).order_by()
    return {
        "ops": sorted(set(problems.values_list("op", flat=True).distinct())),
        "dtypes": sorted(set(problems.values_list("dtype", flat=True).distinct())),
        "devices": sorted(set(groups_devices)),
    }


def team_visible(*, user: AbstractBaseUser | AnonymousUser, slug: str) -> Team | None:
    """A team whose board the user may see: one they belong to (boards are team-private)."""
    if not user.is_authenticated:
        return None
    return Team.objects.filter(slug=slug, memberships__user=user).first()


def team_stats(*, team: Team) -> dict[str, Any]:
    kept = Iteration.objects.filter(job__team=team, verdict=Iteration.Verdict.KEPT)
    return {
        "jobs": Job.objects.filter(team=team).count(),
        "kept": kept.count(),
        # Interpreter ratios are no "best" (Iteration.interpreter: jobs.selectors.result_facts).
        "best": kept.filter(interpreter=False).aggregate(best=Max("fastest_speedup"))["best"],
    }


# --- Compare page -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CompareChoice:
    ref: str  # "<job id>/<seq>", what the picker takes
    label: str


def compare_choices(
    *, user: AbstractBaseUser | AnonymousUser, limit: int = 30
) -> list[CompareChoice]:
    """The kept kernels the user can see, newest first: what the empty picker offers."""
    rows = (
        Iteration.objects.filter(job__in=jobs_visible_to(user=user), verdict__in=BEST_VERDICTS)
        .select_related("task__problem", "job")
        .only("job_id", "seq", "fastest_speedup", "interpreter", "job__title", "task__problem__key")
        .order_by("-created_at")[:limit]
    )
    return [
        CompareChoice(
            ref=f"{it.job_id}/{it.seq}",
            label=f"{it.job.title} #{it.seq} · {it.task.problem.key}",
        )
        for it in rows
    ]
