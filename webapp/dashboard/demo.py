"""Realistic finished runs, recorded through the same services a worker calls.

For the screenshots, the browser test and the render benchmark: each step is a real candidate
source (rendered from a kernels/ family) with an Evaluation.to_dict()- and Profile.to_dict()-
shaped record, numbers in the range an H100 gives for these ops. The timings are illustrative,
not measurements; nothing here claims to have run on a GPU.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

import kernels
from webapp.accounts.models import Team
from webapp.jobs import services
from webapp.jobs.models import Iteration, Job
from webapp.jobs.submission import JobRequest, jobs_submit

H100 = {
    "name": "NVIDIA H100 80GB HBM3 (demo data)",
    "kind": "cuda",
    "torch": "2.11.0+cu128",
    "triton": "3.6.0",
    "driver": "570.124.06",
    "cuda": "12.8",
    "peak_tflops": 740.0,
    "peak_gbps": 3010.0,
    "peak_tflops_by_dtype": {"bf16": 740.0, "fp16": 740.0, "fp32": 49.0},
    "method": "measured: dense matmul and device copy",
    "cached": True,
}
NCU_FIXTURE = (
    settings.BASE_DIR / "harness" / "tests" / "fixtures" / "h100_triton_matmul_4096_fp16.ncu-rep"
)

# verdict, what the planner tried (the hypothesis), how it changes the best parameters
PLAN: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("baseline", "Baseline: the family's default point, to measure the starting line.", {}),
    (
        "kept",
        "Rows are short for 8 warps: drop to 4 warps so each thread holds 8 elements.",
        {"NUM_WARPS": 4},
    ),
    (
        "reverted",
        "Stream the input with evict-first, it is read exactly once.",
        {"EVICT_FIRST": True},
    ),
    (
        "kept",
        "Persistent grid, two programs per SM: prefetch the next rows while finishing these.",
        {"PROGRAMS_PER_SM": 2},
    ),
    ("compile_failed", "Widen the block to 16 rows; register pressure may spill.", {"ROWS": 16}),
    ("incorrect", "Skip the mask on full tiles (N is a multiple of the block).", {"BLOCK_N": 512}),
    (
        "reverted",
        "Two-pass mode with 2048-wide chunks, the second read hits L2.",
        {"MODE": "two_pass", "BLOCK_N": 2048},
    ),
    (
        "kept",
        "Four rows per program and 8 warps: fill the memory pipe on H100.",
        {"ROWS": 4, "NUM_WARPS": 8},
    ),
    ("cheat", "Cache the output between calls (flagged by the judge).", {"ROWS": 8}),
    ("reverted", "Two warps per row group; fewer barriers.", {"NUM_WARPS": 2}),
)


# The even-seeded teams' different ideas at some steps (step -> change, hypothesis).
VARIANT: dict[int, tuple[dict[str, Any], str]] = {
    1: ({"NUM_WARPS": 2}, "Two warps per program: more programs resident per SM."),
    3: ({"EVICT_FIRST": True}, "Evict-first on the input: keep L2 for the weight vector."),
    7: ({"ROWS": 4, "NUM_WARPS": 4}, "Four rows per program at 4 warps: more bytes in flight."),
}


@dataclass(frozen=True)
class Seeded:
    job: Job
    iterations: int


def _stats(median: float, rng: random.Random) -> dict[str, float]:
    iqr = median * rng.uniform(0.01, 0.04)
    return {
        "median_us": round(median, 3),
        "iqr_us": round(iqr, 3),
        "mean_us": round(median * 1.004, 3),
        "min_us": round(median - iqr, 3),
        "samples": rng.randint(180, 400),
        "rel_stderr": round(rng.uniform(0.002, 0.008), 4),
    }


def evaluation(problem: kernels.Problem, *, verdict: str, candidate_us: float, rng: random.Random,
               device: dict | None = None, torch_us: float | None = None) -> dict[str, Any]:  # fmt: skip
    """`torch_us`: what eager PyTorch takes at this shape (the same in every step of a run)."""
    op = kernels.get_op(problem.op)
    if verdict == "baseline":
        torch_us = candidate_us
    baselines = {"torch": 1.0, "compile": 0.78}
    base_torch = torch_us or 48.0 * op.bytes_moved(problem) / 67_108_864
    stats = {name: _stats(base_torch * f, rng) for name, f in baselines.items()}
    passed = verdict in ("baseline", "kept", "reverted")
    timings = None
    if passed:
        speedups = {n: round(s["median_us"] / candidate_us, 4) for n, s in stats.items()}
        timings = {
            "regime": "offline",
            "protocol": "kf-timing-v1",
            "candidate": _stats(candidate_us, rng),
            "baselines": stats,
            "speedups": speedups,
            "speedup_ci": {
                n: [round(v * 0.98, 4), round(v * 1.02, 4)] for n, v in speedups.items()
            },
            "noise": 0.012,
        }
    seconds = candidate_us * 1e-6
    gbps = op.bytes_moved(problem) / seconds / 1e9 if passed else None
    tflops = op.flops(problem) / seconds / 1e12 if passed else None
    stages = [
        {"name": "smoke", "passed": True, "worst_error": 0.02, "cases": 1, "detail": ""},
        {"name": "shape_sweep", "passed": verdict != "incorrect", "worst_error": 0.31 if verdict != "incorrect" else 7.5,
         "cases": 7, "detail": "" if verdict != "incorrect" else "shape (17, 257): 112 of 4369 elements off; worst at [3, 256]: 0.0 vs 1.73"},
        {"name": "adversarial", "passed": True, "worst_error": 0.44, "cases": 3, "detail": ""},
        {"name": "determinism", "passed": True, "worst_error": 0.0, "cases": 2, "detail": ""},
    ]  # fmt: skip
    if verdict == "compile_failed":
        stages = []
    findings = []
    if verdict == "cheat":
        findings = [{"check": "cached_result", "severity": "reject",
                     "detail": "output unchanged after the inputs were re-randomized"}]  # fmt: skip
    log = "" if verdict != "compile_failed" else (
        "triton.compiler.errors.CompilationError: at 31:8:\n"
        "    x = tl.load(x_rows + cols[None, :], mask=mask)\n"
        "        ^\nout of resource: shared memory, Required: 262144, Hardware limit: 232448"
    )  # fmt: skip
    return {
        "candidate_id": f"{rng.getrandbits(64):016x}",
        "problem_key": problem.key,
        "verdict": {"compile_failed": "compile_error", "cheat": "cheat", "incorrect": "incorrect"}.get(verdict, "passed"),
        "compile": {"ok": verdict != "compile_failed", "log": log, "seconds": round(rng.uniform(0.8, 2.5), 2),
                    "cached": False, "registers": rng.choice([32, 40, 56]), "spills": 0, "shared_mem_bytes": 0},
        "stages": stages,
        "findings": findings,
        "timings": timings,
        "tflops": round(tflops, 3) if tflops else None,
        "gbps": round(gbps, 1) if gbps else None,
        "pct_of_roof": round(100 * gbps / (device or H100)["peak_gbps"], 1) if gbps else None,
        "implausible": False,
        "device": device or H100,
        "duration_s": round(rng.uniform(6, 14), 2),
        "stdout_tail": "",
        "error": "" if passed else "See the failing stage.",
        "kernels": [f"{problem.op}_kernel"],
        "isolation": {"process": "spawn", "network": "none"},
        "checks": {},
    }  # fmt: skip


def profile(problem: kernels.Problem, *, candidate_us: float, rng: random.Random,
            report_path: str | None) -> dict[str, Any]:  # fmt: skip
    op = kernels.get_op(problem.op)
    dram_pct = min(93.0, 100 * op.bytes_moved(problem) / (candidate_us * 1e-6) / 3.35e12)
    return {
        "candidate_id": "",
        "problem_key": problem.key,
        "metrics": {
            "duration_ns": round(candidate_us * 1000 * 0.97),
            "sm_pct": round(rng.uniform(8, 22), 1),
            "memory_pct": round(dram_pct + 1.5, 1),
            "dram_pct": round(dram_pct, 1),
            "l2_hit_pct": round(rng.uniform(30, 55), 1),
            "l1_hit_pct": 0.0,
            "achieved_occupancy_pct": round(rng.uniform(55, 92), 1),
            "theoretical_occupancy_pct": 100.0,
            "registers_per_thread": rng.choice([24, 32, 40]),
            "block_size": rng.choice([64, 128, 256]),
            "grid_size": rng.choice([1024, 2048, 4096]),
            "waves_per_sm": round(rng.uniform(3, 16), 2),
            "issue_active_pct": round(rng.uniform(9, 20), 1),
            "eligible_warps_per_cycle": round(rng.uniform(0.1, 0.5), 2),
            "dram_read_bytes": op.bytes_moved(problem) * 2 // 3,
            "dram_write_bytes": op.bytes_moved(problem) // 3,
            "spill_requests": 0,
        },
        "bottleneck": "memory",
        "stalls": [["long_scoreboard", round(rng.uniform(20, 60), 1)], ["barrier", 2.1], ["wait", 1.4]],
        "rules": [{"rule": "SOLBottleneck", "section": "SpeedOfLight", "title": "Memory bound",
                   "message": "Memory is more heavily utilized than Compute.", "est_speedup_pct": None}],
        "kernels": [f"{problem.op}_kernel"],
        "report_path": report_path,
        "clock_control": "none",
        "error": "",
    }  # fmt: skip


def _report_copy(job: Job, index: int) -> str | None:
    if not NCU_FIXTURE.exists():
        return None
    relative = Path("ncu") / str(job.id) / f"{index}.ncu-rep"
    target = Path(settings.MEDIA_ROOT) / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(NCU_FIXTURE, target)
    return str(relative)


def seed_job(*, user: Any, team: Team, title: str, shapes: list[tuple[str, str, str]],
             steps: int = len(PLAN), seed: int = 0, device: dict | None = None,
             reports: bool = True, spread_s: float = 45.0) -> Seeded:  # fmt: skip
    """A finished shape-set job whose tasks ran `steps` iterations each, as a worker records them."""
    rng = random.Random(seed)
    problems = [kernels.parse_problem(*s) for s in shapes]
    with transaction.atomic():
        job = _submit(user, team, title, problems)
        claims = [
            services.task_claim(task_id=t.id, worker="demo-worker@h100")
            for t in job.tasks.order_by("id")
        ]  # claimed before commit: a live worker cannot take them
    total = 0
    for claim, problem in zip(claims, problems, strict=True):
        assert claim is not None
        family = kernels.get_op(problem.op).families()[0]
        params = family.default(problem)
        best_params, best_us, best_index, best = dict(params), None, 0, 0.0
        base_us = 40.0 * kernels.get_op(problem.op).bytes_moved(problem) / 67_108_864 + 4.0
        for index in range(steps):
            verdict, hypothesis, change = PLAN[index % len(PLAN)]
            if seed % 2 == 0:  # a second team tries other points, so their winners differ
                change, hypothesis = VARIANT.get(index % len(PLAN), (change, hypothesis))
            point = {**best_params, **change}
            if family.check(problem, point):
                point = dict(best_params)
            source = family.render(problem, point)
            if verdict == "compile_failed":
                source = source.replace("ROWS = ", "ROWS = 16  # was ", 1)
            if verdict == "baseline":
                us = base_us
            elif verdict == "kept":
                us = (best_us or base_us) * rng.uniform(0.72, 0.9)
            else:
                us = (best_us or base_us) * rng.uniform(1.02, 1.25)
            ev = evaluation(
                problem, verdict=verdict, candidate_us=us, rng=rng, device=device, torch_us=base_us
            )
            if verdict == "baseline":
                ev["timings"]["baselines"]["torch"] = _stats(us * 1.0, rng)
            speedup = None
            if ev["timings"]:
                speedup = ev["timings"]["speedups"]["torch"]
            if verdict in ("baseline", "kept"):
                best_us, best_params = us, point
                best = max(best, speedup or 0.0)  # the best so far only moves up
            saved = services.iteration_record(
                task_id=claim.task_id,
                attempt=claim.attempt,
                data=services.IterationData(
                    index=index,
                    verdict=verdict,
                    parent=None if index == 0 else best_index,
                    hypothesis=hypothesis if index < len(PLAN) else f"{hypothesis} (round {index // len(PLAN) + 1})",
                    source=source,
                    candidate_id=ev["candidate_id"],
                    reason={"kept": "faster than the best by more than the noise",
                            "reverted": "not faster than the best"}.get(verdict, ev["error"]),
                    family=family.name,
                    params=point,
                    evaluation=ev,
                    # What the harness decides for these numbers (every interval above 1); a
                    # real worker passes its call (harness/judge/wins.py), webapp may not import it.
                    beats_baselines=bool(ev["timings"]) and all(
                        low > 1.0 for low, _ in ev["timings"]["speedup_ci"].values()
                    ),
                    speedup=speedup,
                    best_speedup=best,
                    elapsed_s=index * spread_s,
                    gpu_s=round(rng.uniform(8, 20), 2),
                    llm_tokens=rng.randint(2000, 9000),
                    llm_cost_usd=round(rng.uniform(0.01, 0.06), 4),
                ),
            )  # fmt: skip
            assert saved is not None
            if ev["timings"]:
                path = _report_copy(job, saved.seq) if reports and index < 12 else None
                services.iteration_profile_record(
                    task_id=claim.task_id, index=index,
                    profile=profile(problem, candidate_us=us, rng=rng, report_path=path),
                )  # fmt: skip
            if verdict in ("baseline", "kept"):
                best_index = index
            total += 1
        services.task_search_record(
            task_id=claim.task_id,
            attempt=claim.attempt,
            search=_search([f.name for f in kernels.get_op(problem.op).families()], best, rng),
        )
        services.task_finish(
            task_id=claim.task_id, attempt=claim.attempt, stop_reason="budget spent"
        )
    _spread_in_time(job, spread_s)
    return Seeded(job=job, iterations=total)


def _search(families: list[str], best: float, rng: random.Random) -> dict[str, Any]:
    """A task's search record, shaped as the worker sends it (agents SearchStats.to_dict()),
    with illustrative numbers: two tiers, the time they took, what each family screened."""
    screened, verified = rng.randint(60, 120), rng.randint(3, 6)
    other = 9 if len(families) > 1 else 0  # the families' counts add up to the total
    screen_s, verify_s = round(rng.uniform(40, 90), 1), round(verified * rng.uniform(20, 30), 1)

    def tier(n: int, gpu_s: float) -> dict[str, Any]:
        return {"candidates": n, "passed": n, "gpu_s": gpu_s, "per_gpu_hour": n * 3600 / gpu_s}

    return {
        "screened": screened,
        "fully_verified": verified,
        "checked": 0,
        "tiers": {"screen": tier(screened, screen_s), "verify": tier(verified, verify_s)},
        "time_s": {"compile": round(screen_s * 3, 1), "screen": screen_s, "verify": verify_s,
                   "profile": 12.0, "wall": round(screen_s + verify_s + 30, 1)},
        "families": {  # the first family led; a second one screened worse (9 of the total)
            families[0]: {"screened": screened - other, "passed": screened - other - 3,
                          "best_speedup": round(best * rng.uniform(0.97, 1.02), 3)},
            **({families[1]: {"screened": 9, "passed": 4, "best_speedup": 0.61}}
               if len(families) > 1 else {}),
        },
    }  # fmt: skip


def _submit(user: Any, team: Team, title: str, problems: list[kernels.Problem]) -> Job:
    request = JobRequest(
        team=team, title=title, queue="gpu.h100", gpu_minutes=30, problems=tuple(problems)
    )
    (job,) = jobs_submit(user=user, request=request)
    return job


def _spread_in_time(job: Job, spread_s: float) -> None:
    """Seeded rows are written within a second; give them the pace of a real run for charts."""
    rows = list(Iteration.objects.filter(job=job).order_by("seq").values_list("id", "seq"))
    start = timezone.now() - timedelta(seconds=spread_s * len(rows))
    for row_id, seq in rows:
        Iteration.objects.filter(id=row_id).update(
            created_at=start + timedelta(seconds=spread_s * seq)
        )


def stream_job(*, user: Any, team: Team, steps: int, rate: float, wait_s: float,
               announce: Any = None) -> Job:  # fmt: skip
    """A running job whose single task records `steps` iterations at `rate` per second."""
    import time

    problem = kernels.parse_problem("softmax", "1024x8192", "fp32")
    with transaction.atomic():
        job = _submit(user, team, f"Live stream at {rate:g}/s", [problem])
        task = job.tasks.get()
        claim = services.task_claim(task_id=task.id, worker="demo-stream@h100")
    assert claim is not None
    if announce:
        announce(job)
    time.sleep(wait_s)
    rng = random.Random(3)
    best = 1.0
    family = kernels.get_op(problem.op).families()[0]
    source = family.render(problem, family.default(problem))
    start = time.monotonic()
    for index in range(steps):
        verdict, hypothesis, _ = PLAN[index % len(PLAN)]
        if index and verdict == "baseline":  # one baseline per task, at the start
            verdict, hypothesis = (
                "reverted",
                "Three rows per program with 8 warps, as a middle point.",
            )
        speedup = None
        if verdict == "baseline":
            speedup = 1.0
        elif verdict == "kept":  # kept means faster than the best, by more than the noise
            best = speedup = round(best * rng.uniform(1.003, 1.012), 3)
        elif verdict == "reverted":
            speedup = round(best * rng.uniform(0.6, 0.99), 3)
        services.iteration_record(
            task_id=claim.task_id, attempt=claim.attempt,
            data=services.IterationData(
                index=index, verdict=verdict, parent=None if index == 0 else 0,
                hypothesis=f"{hypothesis} (step {index})", speedup=speedup, best_speedup=best,
                source=source,
                elapsed_s=time.monotonic() - start, gpu_s=0.5, llm_cost_usd=0.001,
            ),
        )  # fmt: skip
        # Pace by the clock, not by sleeping a fixed time after each (slow) write.
        time.sleep(max(0.0, start + (index + 1) / rate - time.monotonic()))
    services.task_finish(task_id=claim.task_id, attempt=claim.attempt, stop_reason="stream done")
    return job
