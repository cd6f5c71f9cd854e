"""Throughput of one shape-set job with one GPU worker and with several (issue 19).

    python -m benchmarks.worker_scaling --gpus 0 0,1 --out benchmarks/results/worker_scaling_h100x2.json

For each GPU set it starts the product as a team would (`manage.py up` with
CUDA_VISIBLE_DEVICES set: its SQLite database and private Redis in a fresh folder, one Celery
worker per visible GPU on that model's queue), submits one job of 8 matmul problems through the
product's submission service, waits for the job to end, samples every GPU's utilisation with
`nvidia-smi` meanwhile, and stops everything. It reports, per run: wall time from submission to
the job's end, each GPU's busy fraction over that window, each task's worker and interval; and
across runs: the throughput ratio, whether a worker ever ran two tasks at once (each worker owns
one GPU, so a GPU never times two candidates at once), and how far each problem's torch.matmul
time moved from the one-worker run (a timing that moves beyond noise means the GPUs disturb each
other).

Every run starts as a worker machine does after its first job: the device's ceilings measured
and the cuBLASLt baseline built (once, before the runs: `harness.warm_up`), nothing compiled.
Each run gets a fresh harness cache holding only those machine facts, so the later run inherits
no compiled candidate from the earlier one.

The job's side runs in a child process (`--watch`) with the run's settings, so this process
never loads Django itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Eight GEMMs of a Llama-3-8B layer: q/k/v, gate/up, down and o at a 2048-token prefill, and
# four decode-size ones (1-32 tokens).
SHAPES = (
    "2048x6144x4096",
    "2048x14336x4096",
    "2048x4096x14336",
    "2048x4096x4096",
    "1x6144x4096",
    "8x28672x4096",
    "4x4096x14336",
    "32x8192x8192",
)
UP_TIMEOUT_S = 300


@dataclass(frozen=True)
class TaskRun:
    problem: str
    worker: str
    status: str
    started: float | None  # seconds after submission
    finished: float | None
    torch_us: float | None  # torch.matmul's median in the task's evaluations (GPU time)
    stop_reason: str = ""  # why the task's search ended (the agent's stop reason)
    error: str = ""
    # The task's best kept kernel: its final full-protocol verification's verdict ("" when none
    # ran), and its headline when it is a ranked win, else why it is not (PyTorch serves it).
    final_verdict: str = ""
    outcome: str = ""
    # The agent's own account of the search (its "search" event: screened and verified counts,
    # where the time went, each family's screen line, why it kept what it kept).
    search: dict[str, Any] = field(default_factory=dict)
    # Each attempt the judge turned away ("family verdict: reason"): the 2x H200 run of
    # 2026-11-28 kept nothing on two problems after "1 error" and could not say what it was.
    turned_away: list[str] = field(default_factory=list)


@dataclass
class Run:
    gpus: str  # CUDA_VISIBLE_DEVICES of `up`
    job_status: str = ""
    wall_s: float | None = None  # submission to the job's end
    tasks: list[TaskRun] = field(default_factory=list)
    busy: dict[str, float] = field(default_factory=dict)  # GPU index -> busy fraction
    error: str = ""
    cpus: str = ""  # the CPU cores `up` and everything it starts were pinned to ("": all)


# ------------------------------------------------------------------ what the runs show


def overlapping(tasks: list[TaskRun]) -> list[tuple[str, str, str]]:
    """(worker, problem, problem) for every two tasks one worker ran at the same time."""
    found = []
    by_worker: dict[str, list[TaskRun]] = {}
    for t in tasks:
        if t.started is not None and t.finished is not None:
            by_worker.setdefault(t.worker, []).append(t)
    for worker, runs in by_worker.items():
        runs.sort(key=lambda t: t.started or 0.0)
        for a, b in zip(runs, runs[1:], strict=False):
            if (b.started or 0.0) < (a.finished or 0.0):
                found.append((worker, a.problem, b.problem))
    return found


def busy_fractions(
    samples: list[tuple[float, str, float]], start: float, end: float, gpus: str
) -> dict:
    """GPU index -> share of the samples in [start, end] with utilisation above 0, for the GPUs
    in `gpus` (CUDA_VISIBLE_DEVICES: another run may use the others at the same time)."""
    mine = set(gpus.split(","))
    seen: dict[str, list[bool]] = {}
    for t, gpu, util in samples:
        if start <= t <= end and gpu in mine:
            seen.setdefault(gpu, []).append(util > 0)
    return {gpu: sum(v) / len(v) for gpu, v in sorted(seen.items()) if v}


def timing_drift(base: Run, other: Run) -> dict[str, float]:
    """Problem -> torch.matmul time in `other` over the same in `base` (1.0: unmoved)."""
    before = {t.problem: t.torch_us for t in base.tasks if t.torch_us}
    return {
        t.problem: t.torch_us / before[t.problem]
        for t in other.tasks
        if t.torch_us and before.get(t.problem)
    }


def balance(run: Run) -> dict[str, Any]:
    """Where a ratio below the GPU count goes: `task_s`, the tasks' summed length (grows when
    workers slow each other down), and `idle_at_end_s`, each worker's wait from its last task
    to the job's end (uneven task lengths: one worker runs the last task alone)."""
    done = [t for t in run.tasks if t.started is not None and t.finished is not None]
    last: dict[str, float] = {}
    for t in done:
        last[t.worker] = max(last.get(t.worker, 0.0), t.finished or 0.0)
    return {
        "task_s": round(sum((t.finished or 0.0) - (t.started or 0.0) for t in done), 1),
        "idle_at_end_s": {
            w: round(run.wall_s - end, 1) for w, end in sorted(last.items()) if run.wall_s
        },
    }


def summary(runs: list[Run]) -> dict[str, Any]:
    base = runs[0]
    out: dict[str, Any] = {
        "overlaps": {r.gpus: overlapping(r.tasks) for r in runs},
        "balance": {r.gpus: balance(r) for r in runs},
    }
    for r in runs[1:]:
        if base.wall_s and r.wall_s:
            out[f"throughput_{r.gpus}_vs_{base.gpus}"] = base.wall_s / r.wall_s
        drift = timing_drift(base, r)
        if drift:
            out[f"torch_time_drift_{r.gpus}"] = {
                "per_problem": drift,
                "median": statistics.median(drift.values()),
            }
    return out


# ------------------------------------------------------------------ running the product


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sample_gpus(samples: list, stop: threading.Event) -> None:
    """nvidia-smi every 200 ms: (time, GPU index, utilisation %)."""
    cmd = ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]
    while not stop.is_set():
        try:
            text = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            return  # no GPU here: nothing to sample
        now = time.time()
        for line in text.strip().splitlines():
            index, _, util = line.partition(",")
            with contextlib.suppress(ValueError):
                samples.append((now, index.strip(), float(util)))
        stop.wait(0.2)


def warm_machine(gpus: str) -> Path:
    """Measure the device's ceilings and build the cuBLASLt baseline (what a worker keeps from
    its first job) in the machine's harness cache; returns that cache."""
    subprocess.run(
        [sys.executable, "-c", "import harness, kernels; harness.warm_up("
         "kernels.parse_problem('matmul', '256x256x256', 'bf16', 'NN'), deadline_s=600)"],
        cwd=ROOT, env=dict(os.environ, CUDA_VISIBLE_DEVICES=gpus.split(",")[0]),
        check=True, timeout=900,
    )  # fmt: skip
    from harness.device import cache_dir

    return cache_dir()


def seeded_cache(machine: Path, dest: Path) -> Path:
    """A fresh harness cache with only the machine facts (ceilings, cuBLASLt build)."""
    dest.mkdir(parents=True)
    for fact in [*machine.glob("ceilings-*.json"), *machine.glob("cublaslt-*")]:
        copy = shutil.copytree if fact.is_dir() else shutil.copy2
        copy(fact, dest / fact.name)
    return dest


def run_once(
    gpus: str,
    shapes: tuple[str, ...],
    gpu_minutes: int,
    timeout_s: float,
    machine: Path,
    cpus: str = "",
    log_dir: Path | None = None,
) -> Run:
    run = Run(gpus=gpus, cpus=cpus)
    with tempfile.TemporaryDirectory(prefix="kf-scaling-") as var:
        env = dict(
            os.environ,
            CUDA_VISIBLE_DEVICES=gpus,
            KF_CACHE_DIR=str(seeded_cache(machine, Path(var) / "kf-cache")),
            KF_VAR_DIR=var,
            DJANGO_SETTINGS_MODULE="webapp.settings",
            REDIS_URL=f"redis://127.0.0.1:{_free_port()}/0",  # nothing there: `up` starts its own
            # A machine builds its kernel library once, before its jobs; building it inside
            # the measured window would time the build, not the job.
            KF_LIBRARY_BUILD="0",
        )
        env.pop("DATABASE_URL", None)
        log = open(Path(var) / "up.log", "w+")  # noqa: SIM115  (read while `up` runs)
        pin = ["taskset", "--cpu-list", cpus] if cpus else []  # inherited by all `up` starts
        up = subprocess.Popen(
            [*pin, sys.executable, "manage.py", "up", "--port", str(_free_port())],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        samples: list[tuple[float, str, float]] = []
        stop = threading.Event()
        sampler = threading.Thread(target=_sample_gpus, args=(samples, stop), daemon=True)
        try:
            _wait_for(Path(var) / "up.log", "KernelForge is up", up)
            sampler.start()
            watch = subprocess.run(
                [sys.executable, "-m", "benchmarks.worker_scaling", "--watch",
                 "--gpu-minutes", str(gpu_minutes), "--timeout", str(timeout_s), *shapes],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s + 120,
            )  # fmt: skip
            if watch.returncode != 0:
                raise RuntimeError(f"--watch failed: {watch.stderr[-2000:]}")
            result = json.loads(watch.stdout.strip().splitlines()[-1])
            run.job_status, run.wall_s = result["status"], result["wall_s"]
            run.tasks = [TaskRun(**t) for t in result["tasks"]]
            start = result["submitted"]
            run.busy = busy_fractions(samples, start, start + (run.wall_s or 0.0), gpus)
        except Exception as exc:  # noqa: BLE001  (recorded: the other run still goes)
            log.seek(0)
            run.error = f"{type(exc).__name__}: {exc}\n--- up.log ---\n{log.read()[-3000:]}"
        finally:
            stop.set()
            with contextlib.suppress(ProcessLookupError):  # `up` may have exited already
                os.killpg(up.pid, signal.SIGINT)  # `up` stops its workers, Redis and web server
                try:
                    up.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(up.pid, signal.SIGKILL)
            log.close()
            if log_dir is not None:  # the workers' own account, for when a number looks wrong
                log_dir.mkdir(parents=True, exist_ok=True)
                shutil.copy2(
                    Path(var) / "up.log", log_dir / f"up-gpus-{gpus.replace(',', '_')}.log"
                )
    return run


def _wait_for(path: Path, text: str, proc: subprocess.Popen) -> None:
    end = time.monotonic() + UP_TIMEOUT_S
    while time.monotonic() < end:
        if text in path.read_text():
            return
        if proc.poll() is not None:
            raise RuntimeError(f"`manage.py up` exited ({proc.returncode}) before it was up")
        time.sleep(1)
    raise TimeoutError(f"`manage.py up` not up after {UP_TIMEOUT_S} s")


def watch(shapes: list[str], gpu_minutes: int, timeout_s: float) -> dict[str, Any]:
    """In the run's settings: submit the job as the demo user through the submission service,
    wait for its end, and describe it."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    import kernels
    from webapp.accounts.models import Team
    from webapp.embedded.gpus import detect_gpus
    from webapp.jobs.models import Iteration
    from webapp.jobs.selectors import BEST_VERDICTS, fastest_speedup, why_not_ranked

    KEPT_OR_BASELINE = (
        Iteration.Verdict.KEPT,
        Iteration.Verdict.REVERTED,
        Iteration.Verdict.BASELINE,
    )
    from webapp.jobs.submission import JobRequest, budget_minutes, jobs_submit

    gpus = detect_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"))
    user = get_user_model().objects.get(username="demo")
    request = JobRequest(
        team=Team.objects.get(slug="demo-team"),
        title=f"worker scaling, GPUs {os.environ.get('CUDA_VISIBLE_DEVICES') or 'none'}",
        queue=gpus[0].queue if gpus else "cpu",
        # The product's floor per problem (a starved task never searches): refused below it.
        gpu_minutes=budget_minutes(n_problems=len(shapes), requested=gpu_minutes),
        problems=[kernels.parse_problem("matmul", s, "bf16", "NN") for s in shapes],
    )
    submitted = time.time()
    (job,) = jobs_submit(user=user, request=request)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        job.refresh_from_db()
        if job.is_terminal:
            break
        time.sleep(2)
    wall = time.time() - submitted if job.is_terminal else None

    def since(moment: datetime | None) -> float | None:
        return None if moment is None else moment.timestamp() - submitted

    def outcome(best: Iteration | None) -> str:
        if best is not None and best.ranked:
            return f"winner {fastest_speedup(best.measurement) or 0:.3f}x"
        return why_not_ranked(best)

    tasks = []
    for task in job.tasks.select_related("problem").order_by("problem__position"):
        best = task.iterations.filter(verdict__in=BEST_VERDICTS).order_by("seq").last()
        torch_us = [
            it.evaluation["timings"]["baselines"]["torch"]["median_us"]
            for it in task.iterations.all()
            if _has_torch_time(it.evaluation)
        ]
        tasks.append(
            asdict(
                TaskRun(
                    problem="x".join(str(d) for d in task.problem.shape),
                    worker=task.worker,
                    status=task.status,
                    started=since(task.started_at),
                    finished=since(task.finished_at),
                    torch_us=statistics.median(torch_us) if torch_us else None,
                    stop_reason=task.stop_reason,
                    error=task.error[-500:],
                    final_verdict=(
                        (best.final_evaluation or {}).get("verdict", "") if best else ""
                    ),
                    outcome=outcome(best),
                    search=task.search or {},
                    turned_away=[
                        f"{it.family or 'candidate'} {it.verdict}: {it.reason[:300]}"
                        for it in task.iterations.exclude(verdict__in=KEPT_OR_BASELINE)
                    ],
                )
            )
        )
    status = job.status if job.is_terminal else f"{job.status} after {timeout_s:.0f} s"
    return {"status": status, "wall_s": wall, "submitted": submitted, "tasks": tasks}


def _has_torch_time(evaluation: Any) -> bool:
    try:
        return float(evaluation["timings"]["baselines"]["torch"]["median_us"]) > 0
    except (KeyError, TypeError, ValueError):
        return False


def _device() -> dict[str, str]:
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    return {"gpus": text or "none (CPU: the interpreter worker)"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker_scaling")
    parser.add_argument("shapes", nargs="*", default=list(SHAPES), help="matmul MxNxK, bf16 NN")
    parser.add_argument(
        "--gpus", nargs="+", default=["0", "0,1"], help="CUDA_VISIBLE_DEVICES per run"
    )
    parser.add_argument(
        "--cpus",
        nargs="+",
        help="CPU cores per run (taskset lists, one per --gpus entry), e.g. 0-31 32-63",
    )
    parser.add_argument(
        "--together",
        action="store_true",
        help="start the runs at once (each on its own GPUs and --cpus). Not for the scaling"
        " number: the runs still share the host (disk, memory, caches), and on 4x H200 the"
        " same tasks ran slower beside the other run (results/worker_scaling_h200x4_together"
        ".json); a plumbing check only",
    )
    parser.add_argument("--gpu-minutes", type=int, default=16, help="the job's GPU budget")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a run may take")
    parser.add_argument("--out", help="write the result JSON here")
    parser.add_argument("--watch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.watch:
        print(json.dumps(watch(args.shapes, args.gpu_minutes, args.timeout)))
        return
    cpus = args.cpus or [""] * len(args.gpus)
    if len(cpus) != len(args.gpus):
        parser.error("give one --cpus list per --gpus entry")
    if args.together and not args.cpus:
        parser.error("--together needs --cpus: runs sharing cores would slow each other")
    machine = warm_machine(args.gpus[0])

    def one(gpus: str, cores: str) -> Run:
        logs = Path(args.out).with_suffix(".logs") if args.out else None
        run = run_once(
            gpus, tuple(args.shapes), args.gpu_minutes, args.timeout, machine, cores, logs
        )
        print(json.dumps(asdict(run))[:2000], file=sys.stderr)
        return run

    with ThreadPoolExecutor(len(args.gpus) if args.together else 1) as pool:
        runs = list(pool.map(one, args.gpus, cpus))
    import torch

    result = {
        "what": "one shape-set job (matmul bf16) with one worker per GPU, per GPU set",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks.worker_scaling "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "device": _device(),
        "together": args.together,
        "job": {
            "problems": len(args.shapes),
            "gpu_minutes": args.gpu_minutes,
            "task_budget_s": args.gpu_minutes * 60 / len(args.shapes),  # an even split
        },
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__},
        "runs": [asdict(r) for r in runs],
        "summary": summary(runs),
    }
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
