"""Page-render benchmark for the dashboard: a 5,000-iteration job and a 100,000-row leaderboard.

    .venv/bin/python benchmarks/dashboard_render.py [--requests 40] [--out benchmarks/results/...]

Seeds a throwaway PostgreSQL database (test_kf_dashboard_render, dropped afterwards) with
realistic rows: Evaluation/Profile-shaped JSON from webapp/dashboard/demo.py and rendered
candidate sources from kernels/. Rows are bulk-inserted (the worker path, one service call per
row, would take many minutes for 100,000 rows; it is exercised by the tests instead). Each page
is fetched through Django's test client, logged in, server-side render time only (no browser,
no network), and the queries per request are counted. The numbers are from whatever machine
runs this, a CPU box here, and say so in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings_test")
os.environ["KF_TEST_DATABASE_NAME"] = "test_kf_dashboard_render"

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402

BIG_JOB_ITERATIONS = 5_000
BOARD_ROWS = 100_000
TEAMS = 8
JOBS_PER_TEAM = 25
PROBLEMS_PER_JOB = 4
DEVICES = ("NVIDIA H100 80GB HBM3", "NVIDIA H200")


def seed(rng: random.Random) -> dict:
    import kernels
    from webapp.accounts.models import Membership, Team
    from webapp.dashboard import demo
    from webapp.jobs.models import Iteration, Job, Problem, Task

    alice = django_user("alice")
    teams = []
    for n in range(TEAMS):
        team = Team.objects.create(name=f"Team {n}", slug=f"team-{n}")
        Membership.objects.create(team=team, user=alice, role="owner")
        teams.append(team)

    shapes = [("rmsnorm", f"{m}x{n}", d) for m in (1024, 2048, 4096, 8192, 16384)
              for n in (1024, 2048, 4096, 8192) for d in ("fp16", "bf16")]  # fmt: skip
    shapes += [("softmax", f"{m}x{n}", d) for m in (1024, 4096, 8192, 16384)
               for n in (2048, 4096, 8192) for d in ("fp16", "fp32")]  # fmt: skip
    shapes += [("matmul", f"{s}x{s}x{s}", "bf16", "NN") for s in (1024, 2048, 4096, 8192)]
    pool = [kernels.parse_problem(*s) for s in shapes][:100]
    sources = {}

    def source_for(problem) -> str:
        if problem.op not in sources:
            family = kernels.get_op(problem.op).families()[0]
            sources[problem.op] = family.render(problem, family.default(problem))
        return sources[problem.op]

    now = datetime.now(UTC)
    per_task = BOARD_ROWS // (TEAMS * JOBS_PER_TEAM * PROBLEMS_PER_JOB)
    rows = []
    for t_i, team in enumerate(teams):
        for j in range(JOBS_PER_TEAM):
            job = Job.objects.create(team=team, created_by=alice, title=f"{team.name} run {j}",
                                     kind="shapes", status="done")  # fmt: skip
            picks = rng.sample(pool, PROBLEMS_PER_JOB)
            seq = 0
            for pos, spec in enumerate(picks):
                problem = Problem.objects.create(job=job, position=pos, op=spec.op,
                    shape=list(spec.shape), dtype=spec.dtype, layout=spec.layout, key=spec.key)  # fmt: skip
                task = Task.objects.create(
                    job=job, problem=problem, queue="gpu.h100", status="done"
                )
                device = {**demo.H100, "name": DEVICES[(t_i + j) % 2]}
                for index in range(per_task):
                    seq += 1
                    us = 30 * rng.uniform(0.5, 1.2)
                    ev = demo.evaluation(
                        spec, verdict="kept", candidate_us=us, rng=rng, device=device
                    )
                    speedup = ev["timings"]["speedups"]["torch"]
                    rows.append(Iteration(job=job, task=task, index=index, seq=seq, attempt=1,
                        parent=index - 1 if index else None, verdict="kept",
                        hypothesis="Four rows per program and 8 warps.", source="# short\n",
                        candidate_id=ev["candidate_id"], family="rowwise", evaluation=ev,
                        speedup=speedup, best_speedup=speedup, gpu_s=12.0, llm_cost_usd=0.02,
                        created_at=now - timedelta(minutes=rng.randint(0, 60 * 24 * 90))))  # fmt: skip
            Job.objects.filter(id=job.id).update(last_seq=seq)
            if len(rows) >= 5000:
                Iteration.objects.bulk_create(rows, batch_size=1000)
                rows = []
    Iteration.objects.bulk_create(rows, batch_size=1000)

    # The big job: 5,000 iterations over two problems, every verdict, profiles on the timed ones.
    big = Job.objects.create(team=teams[0], created_by=alice, title="Big run", kind="shapes",
                             status="done")  # fmt: skip
    rows, seq = [], 0
    for pos, spec in enumerate(pool[:2]):
        problem = Problem.objects.create(job=big, position=pos, op=spec.op, shape=list(spec.shape),
                                         dtype=spec.dtype, layout=spec.layout, key=spec.key)  # fmt: skip
        task = Task.objects.create(job=big, problem=problem, queue="gpu.h100", status="done")
        best = 0.0
        for index in range(BIG_JOB_ITERATIONS // 2):
            seq += 1
            verdict = demo.PLAN[index % len(demo.PLAN)][0] if index else "baseline"
            us = 30 * rng.uniform(0.5, 1.2)
            ev = demo.evaluation(spec, verdict=verdict, candidate_us=us, rng=rng)
            speedup = ev["timings"]["speedups"]["torch"] if ev["timings"] else None
            best = max(best, speedup or 0.0) if verdict in ("kept", "baseline") else best
            prof = (
                demo.profile(spec, candidate_us=us, rng=rng, report_path=None) if speedup else None
            )
            rows.append(Iteration(job=big, task=task, index=index, seq=seq, attempt=1,
                parent=index - 1 if index else None, verdict=verdict,
                hypothesis=demo.PLAN[index % len(demo.PLAN)][1], source=source_for(spec),
                candidate_id=ev["candidate_id"], family="rowwise", evaluation=ev, profile=prof,
                speedup=speedup, best_speedup=best, gpu_s=12.0, llm_cost_usd=0.02,
                created_at=now - timedelta(seconds=30 * (BIG_JOB_ITERATIONS - seq))))  # fmt: skip
    Iteration.objects.bulk_create(rows, batch_size=500)
    Job.objects.filter(id=big.id).update(last_seq=seq)
    from webapp.dashboard.services import board_rebuild

    # bulk_create skips the post_save receiver that keeps the board current; rebuild it once.
    board_rebuild()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return {"user": alice, "big": big, "teams": teams}


def django_user(name: str):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(username=name, password="pw-for-bench-1")


def measure(client: Client, url: str, n: int) -> dict:
    for _ in range(3):
        assert client.get(url).status_code == 200, url
    times, queries = [], 0
    for _ in range(n):
        with CaptureQueriesContext(connection) as ctx:
            start = time.perf_counter()
            response = client.get(url)
            body = response.content
            times.append((time.perf_counter() - start) * 1000)
        queries = len(ctx.captured_queries)
        assert response.status_code == 200, url
    times.sort()
    return {
        "url": url,
        "requests": n,
        "p50_ms": round(statistics.median(times), 1),
        "p95_ms": round(times[max(0, int(0.95 * n) - 1)], 1),
        "max_ms": round(times[-1], 1),
        "queries": queries,
        "bytes": len(body),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/dashboard_render_cpu.json"))
    args = parser.parse_args()
    rng = random.Random(7)
    setup_test_environment()
    settings.DEBUG = False
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        t0 = time.perf_counter()
        world = seed(rng)
        seed_s = time.perf_counter() - t0
        from webapp.jobs.models import Iteration

        big = world["big"]
        client = Client()
        client.force_login(world["user"])
        mid = BIG_JOB_ITERATIONS // 2 + 4
        top = Iteration.objects.filter(verdict="kept").exclude(job=big).order_by("-speedup")[:2]
        a, b = list(top)
        pages = {
            "jobs list": "/",
            "jobs list, filtered": "/?team=team-3&op=rmsnorm&status=done",
            "job page (5,000 iterations)": f"/jobs/{big.id}/",
            "live backfill JSON (1,000 events)": f"/jobs/{big.id}/events/?after=0",
            "iteration page (diff, metrics, roofline)": f"/jobs/{big.id}/iterations/{mid}/",
            "leaderboard (100,000 ranked rows)": "/leaderboards/",
            "leaderboard, page 3": "/leaderboards/?page=3",
            "leaderboard, filtered": "/leaderboards/?op=rmsnorm&dtype=fp16",
            "team page (wins)": "/leaderboards/teams/team-2/",
            "compare two teams' winners": f"/compare/?a={a.job_id}/{a.seq}&b={b.job_id}/{b.seq}",
        }
        results = {name: measure(client, url, args.requests) for name, url in pages.items()}
        counts = {
            "iterations": Iteration.objects.count(),
            "big_job_iterations": Iteration.objects.filter(job=big).count(),
            "ranked_rows": Iteration.objects.filter(verdict="kept").exclude(job=big).count(),
        }
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)
    document = {
        "benchmark": "dashboard page render (server side, Django test client)",
        "date": datetime.now(UTC).date().isoformat(),
        "machine": f"CPU machine, {os.cpu_count()} cores ({platform.processor() or platform.machine()}); "
                   "no GPU involved; shared with other jobs while measured",
        "database": "PostgreSQL 127.0.0.1 (throwaway test_kf_dashboard_render)",
        "python": platform.python_version(),
        "django": django.get_version(),
        "command": ".venv/bin/python benchmarks/dashboard_render.py"
                   f" --requests {args.requests}",
        "seeded": counts,
        "seed_seconds": round(seed_s, 1),
        "target": "p95 < 200 ms per page",
        "pages": results,
        "all_under_target": all(r["p95_ms"] < 200 for r in results.values()),
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(document, indent=2) + "\n")
    width = max(map(len, results))
    for name, r in results.items():
        print(
            f"{name:<{width}}  p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms  q {r['queries']}"
        )
    print("all under 200 ms p95:", document["all_under_target"], "->", args.out)


if __name__ == "__main__":
    main()
