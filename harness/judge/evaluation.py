"""evaluate(): is a candidate right, and how fast, decided outside any process it runs in.

The trust boundary (harness/README.md): a source that is a byte-identical render of one of
our families (judge/trust.py) runs in the judge's process like any trusted kernel. Anything
else is untrusted, and its host code only ever runs in its sandbox:

  1. candidate_record  (untrusted sandbox) prepare()/run() recorded as plans, shape by shape,
                       nothing launched; reused from the artifact store when this source
                       was recorded at these shapes before (the precompile does it ahead)
  2. judge             (trusted) cases from secret seeds, the candidate run on every case
                       (plans launched by the judge's code on a GPU; on the CPU replayed by
                       a sandboxed executor, candidate_serve, on the judge's shared arena),
                       timing against the baselines, then references and every check
  3. judge_sanitize    (trusted, opt-in) the same plans under compute-sanitizer

The parent (this module) never initialises CUDA and never imports candidate code; it keeps
from a child only what the child's result message says, hashed and filed by itself
(judge/artifacts.py).
"""

from __future__ import annotations

import base64
import dataclasses
import fcntl
import os
import secrets
import shutil
import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from harness import device as device_mod
from harness import gpu_state, redact, timing
from harness.compile_cache import trusted_dirs, trusted_env
from harness.config import TIMING_PROTOCOL, EvalConfig
from harness.judge import artifacts, recording, sanitizer, static_scan, trust
from harness.judge.baselines import applicable
from harness.judge.cases import case_problems, timed_problem
from harness.ops import resolve_op
from harness.results import (
    Backend,
    Candidate,
    CompileResult,
    Evaluation,
    Finding,
    Regime,
    StageResult,
    Timings,
    Verdict,
)
from harness.sandbox import ChildResult, ChildStatus, prestart, run_child, scratch
from kernels.problem import Problem

STAGE_ORDER = (
    "smoke",
    "shape_sweep",
    "dtypes",
    "adversarial",
    "exact_01",
    "determinism",
    "output_poison",
    "guard_bands",
    "output_dtype",
    "baseline_deviation",
)
_STATUS_VERDICT = {
    ChildStatus.TIMEOUT: Verdict.TIMEOUT,
    ChildStatus.CRASH: Verdict.CRASH,
    ChildStatus.FORGED: Verdict.CHEAT,
    ChildStatus.INFRA: Verdict.INFRA_ERROR,
}
ARENA_BYTES = 4 * 2**30  # the CPU executor's shared arena (sparse: pages exist once written)


class _Stop(Exception):
    """Ends the pipeline early with a finished Evaluation."""

    def __init__(self, evaluation: Evaluation) -> None:
        self.evaluation = evaluation


def evaluate(
    candidate: Candidate, problem: Problem, *, config: EvalConfig | None = None
) -> Evaluation:
    config = config or EvalConfig()
    started = time.monotonic()
    op = resolve_op(problem.op, config.op_ref)
    op.validate(problem)
    gpu = config.device != "cpu" and device_mod.gpu_visible()
    regime: Regime | None = (
        config.regime if gpu and config.regime not in (None, Regime.INTERPRETER) else None
    )
    regime = regime or (Regime.OFFLINE if gpu else Regime.INTERPRETER)
    deadline = started + config.deadline_s if config.deadline_s is not None else None
    config = dataclasses.replace(config, regime=regime, deadline_at=deadline)
    ev = Evaluation(
        candidate_id=candidate.id,
        problem_key=problem.key,
        verdict=Verdict.PASSED,
        compile=CompileResult(ok=False),
        device=device_mod.device_ceilings() if gpu else device_mod.interpreter_info(),
    )
    ev.findings += static_scan.scan(
        candidate.source, forbid_vendor_library=config.forbid_vendor_library, op=problem.op
    )
    runs = run_problem(problem, gpu)
    if runs != problem:
        ev.findings.append(
            Finding(
                "interpreter_dtype",
                "warn",
                "bf16 checked as fp16: Triton's interpreter gets bf16 wrong",
            )
        )
    if not gpu and candidate.backend is Backend.CUDA:
        ev.verdict = Verdict.COMPILE_ERROR
        ev.compile = CompileResult(ok=False, log="CUDA C++ candidates need a GPU; none is visible")
        ev.error = ev.compile.log
        return _finish(ev, started)
    root = Path(scratch.make("eval"))
    try:
        _pipeline(ev, candidate, problem, runs, config, gpu, root)
    except _Stop as stop:
        ev = stop.evaluation
    finally:
        if not config.keep_dir:
            shutil.rmtree(root, ignore_errors=True)
    return _finish(ev, started)


def run_problem(problem: Problem, gpu: bool) -> Problem:
    """The problem as it runs here: Triton's interpreter gets bf16 wrong, so fp16 on the CPU."""
    if not gpu and problem.dtype == "bf16":
        return Problem(problem.op, problem.shape, "fp16", problem.layout)
    return problem


def warm_up(problem: Problem, *, deadline_s: float | None = None) -> None:
    """What the first full evaluation on a device would otherwise do first, ahead of it: measure
    the device's ceilings and build the cuBLASLt baseline's extension (each once per device,
    cached on disk). A failure here is left for that evaluation to report."""
    if not device_mod.gpu_visible():
        return
    started = time.monotonic()
    try:
        device_mod.device_ceilings()
    except RuntimeError:
        return
    deadline = started + deadline_s if deadline_s is not None else None
    names = applicable(problem.op, problem.layout, "cuda")
    _cublaslt_dir(True, names, EvalConfig(deadline_s=deadline_s, deadline_at=deadline))


def warm_judge(config: EvalConfig | None = None) -> None:
    """Start the judge of a coming evaluation ahead, as a warm spare (torch, Dynamo and the
    harness imported), so a run's first full verification starts warm too, not only the
    ones after it. The arguments are the ones _child gives the judge: a spare serves only an
    equal configuration, and any workdir under the scratch root is the same one."""
    config = config or EvalConfig()
    gpu = config.device != "cpu" and device_mod.gpu_visible()
    prestart(
        "judge",
        scratch.root(),
        limits=config.limits,
        cuda=gpu,
        isolate_net=config.network_isolation,
        isolate_fs=config.fs_isolation,
        **_child_io(gpu, trusted=True),
    )


def _finish(ev: Evaluation, started: float) -> Evaluation:
    # A cheat that is also wrong (or that cannot even be judged) is reported as a cheat: that
    # is what the agent must learn.
    rejects = [f for f in ev.findings if f.severity == "reject"]
    if rejects and ev.verdict in (Verdict.PASSED, Verdict.INCORRECT, Verdict.COMPILE_ERROR):
        ev.verdict = Verdict.CHEAT
        why = "; ".join(f"{f.check}: {f.detail}" for f in rejects)
        ev.error = why + (f" (also: {ev.error})" if ev.error else "")
    ev.duration_s = time.monotonic() - started
    return ev


def _child(
    ev: Evaluation,
    phase: str,
    job: dict,
    workdir: Path,
    config: EvalConfig,
    gpu: bool,
    *,
    wall: float | None = None,
    trusted: bool,
    pass_fds: tuple[int, ...] = (),
    started: threading.Event | None = None,
) -> ChildResult:
    wall = _within_deadline(ev, config, phase, wall if wall is not None else config.limits.wall_s)
    res = run_child(
        phase,
        job,
        str(workdir),
        limits=config.limits,
        wall_s=wall,
        cuda=gpu,
        isolate_net=config.network_isolation,
        isolate_fs=config.fs_isolation,
        **_child_io(gpu, trusted=trusted),
        prestart=not pass_fds,  # the next phase's child starts up while this one runs
        pass_fds=pass_fds,
        started=started,
    )
    _account(ev, phase, res, workdir, trusted=trusted)
    return res


def _account(
    ev: Evaluation, phase: str, res: ChildResult, workdir: Path | None, *, trusted: bool
) -> None:
    """What a child's run tells the evaluation; a child that did not finish ends it."""
    # Where an evaluation's time goes (start-up vs work), per phase, from the parent's clock.
    ev.checks.setdefault("phase_wall_s", {})[phase] = round(res.wall_s, 3)
    # Whether a warm spare served it (its imports made ahead): the judge's compile baseline
    # spent 3.5-5.8 s importing in every H200 verification (both_ways_h200_4shapes_d.json).
    ev.checks.setdefault("phase_spare", {})[phase] = res.spare
    if not trusted:
        ev.stdout_tail = redact.output(res.output, workdir)
        ev.isolation = res.isolation.to_dict()
    if res.status is not ChildStatus.OK:
        ev.verdict = Verdict.INFRA_ERROR if trusted else _STATUS_VERDICT[res.status]
        ev.error = f"{phase}: {res.error}"
        if res.status is ChildStatus.INFRA or trusted:
            ev.error += "\n" + res.output[-3000:]
        if res.status is ChildStatus.FORGED:
            ev.findings.append(Finding("result_forged", "reject", res.error))
        raise _Stop(ev)


def _within_deadline(ev: Evaluation, config: EvalConfig, phase: str, wall: float) -> float:
    """A phase's wall-clock limit cut to what is left of the evaluation's deadline; none left
    ends the evaluation as a TIMEOUT before the phase starts."""
    if config.deadline_at is None:
        return wall
    left = config.deadline_at - time.monotonic()
    if left < 1.0:
        ev.verdict = Verdict.TIMEOUT
        ev.error = f"{phase}: the evaluation's deadline passed before this phase could start"
        raise _Stop(ev)
    return min(wall, left)


def _env(gpu: bool) -> dict[str, str]:
    return {} if gpu else {"TRITON_INTERPRET": "1"}


def _child_io(gpu: bool, *, trusted: bool) -> dict[str, Any]:
    """What a child reads and writes beyond its view, and its environment: a trusted child
    reads the artifact store and the cuBLASLt build and writes the trusted compile caches; an
    untrusted one gets none of them."""
    if not trusted:
        return {"readable": (), "writable": (), "env_extra": _env(gpu)}
    return {
        "readable": (str(device_mod.cache_dir()),),
        "writable": trusted_dirs(),
        "env_extra": trusted_env(gpu),
    }


def record_problems(op, problem: Problem, config: EvalConfig, gpu: bool) -> list[Problem]:
    """Every shape the judge will call the candidate at: the cases', the timed one and, for
    the sanitizer, one odd sweep shape."""
    shapes = case_problems(
        op, problem, quick=bool(config.quick), interpreter=not gpu, dtypes=config.dtypes
    )
    shapes.append(timed_problem(problem, interpreter=not gpu))
    if config.sanitize:
        shapes += sanitizer.shapes(op, problem)
    return list(dict.fromkeys(shapes))


def _pipeline(
    ev: Evaluation,
    candidate: Candidate,
    asked: Problem,
    problem: Problem,
    config: EvalConfig,
    gpu: bool,
    root: Path,
) -> None:
    workdir = root / "judge"
    workdir.mkdir()
    dev = "cuda" if gpu else "cpu"
    point = trust.trusted_point(candidate, asked, config.op_ref)
    ev.checks["trusted_render"] = point is not None
    base_job: dict[str, Any] = {
        "problem": problem.to_dict(),
        "op_ref": config.op_ref,
        "device": dev,
        "interpreter": not gpu,
        "quick": config.quick,
        "dtypes": list(config.dtypes),
        "workdir": str(workdir),
    }
    if point is not None:
        subject = _render_subject(candidate, point, asked)
        plans: list[dict] = []
    else:
        plans = _recorded_plans(ev, candidate, problem, config, gpu)
        subject = {"kind": "plans", "plans": plans, "store": str(artifacts.store())}
    job = {
        **base_job,
        "subject": subject,
        "seeds": [secrets.randbits(62) for _ in range(64)],
        "forbid_vendor_library": config.forbid_vendor_library,
        "baseline_error_factor": config.baseline_error_factor,
        "time": config.time_candidate,
        **_timing_job(problem, config, gpu),
    }
    wall = config.limits.wall_s + (config.compile_wall_s if "compile" in job["baselines"] else 0)
    if point is not None and candidate.backend is Backend.CUDA:
        wall += config.compile_wall_s  # our CUTLASS render may build at import
    if point is None and not gpu:
        res = _judge_with_executor(ev, candidate, job, plans, workdir, config, wall)
    else:
        res = _child(ev, "judge", job, workdir, config, gpu, wall=wall, trusted=True)
    _read_judgement(ev, res, problem, config, gpu)
    if config.sanitize and ev.verdict is Verdict.PASSED and not _rejected(ev):
        _sanitize(ev, subject, base_job, problem, config, gpu, workdir)


def subject_for(
    candidate: Candidate, problem: Problem, config: EvalConfig, *, gpu: bool
) -> tuple[dict[str, Any] | None, str]:
    """How the judge runs this candidate at `problem` alone (profile()): our render, or its
    plans (recorded now when none are stored); (None, why) when it cannot be run."""
    point = trust.trusted_point(candidate, problem, config.op_ref)
    if point is not None:
        return _render_subject(candidate, point, problem), ""
    rec = recording.record(candidate, [problem.to_dict()], config, gpu)
    if rec.plans is None:
        why = rec.error["detail"] if rec.error else (rec.child.error if rec.child else "")
        return None, why or rec.compile.log or "no plans"
    return {"kind": "plans", "plans": rec.plans, "store": str(artifacts.store())}, ""


def _render_subject(candidate: Candidate, point: dict, asked: Problem) -> dict[str, Any]:
    return {
        "kind": "render",
        "source": candidate.source,
        "point": point,
        "render_problem": asked.to_dict(),
    }


def _recorded_plans(
    ev: Evaluation,
    candidate: Candidate,
    problem: Problem,
    config: EvalConfig,
    gpu: bool,
) -> list[dict]:
    """The candidate's plans at every shape the judge will use: from the store when recorded
    before (same source, shapes, device and versions), else recorded now in its sandbox."""
    op = resolve_op(problem.op, config.op_ref)
    shapes = [p.to_dict() for p in record_problems(op, problem, config, gpu)]
    wall = _within_deadline(
        ev, config, "candidate_record", recording.record_wall(candidate, config)
    )
    rec = recording.record(candidate, shapes, config, gpu, wall_s=wall)
    ev.checks["plans"] = {"key": rec.key[:16], "cached": rec.cached, "shapes": len(shapes)}
    if rec.child is not None:
        _account(ev, "candidate_record", rec.child, None, trusted=False)
    ev.compile = rec.compile
    if not ev.compile.ok:
        ev.verdict = Verdict.COMPILE_ERROR
        ev.error = ev.compile.log[-2000:]
        raise _Stop(ev)
    if rec.plans is None:
        error = rec.error or {"case": "", "kind": "contract", "detail": "no plans"}
        detail = error["detail"][-1500:]
        if error["kind"] == "raised":
            ev.verdict = Verdict.INCORRECT
            ev.error = f"run() failed at {error['case']}: {detail}"
            ev.stages.append(StageResult("run", False, None, 0, ev.error[:500]))
        else:
            ev.verdict = Verdict.COMPILE_ERROR
            ev.compile = dataclasses.replace(ev.compile, ok=False, log=detail)
            ev.error = f"the candidate cannot be judged as written ({error['case']}): {detail}"
        raise _Stop(ev)
    return rec.plans


def _judge_with_executor(
    ev: Evaluation,
    candidate: Candidate,
    job: dict,
    plans: list[dict],
    workdir: Path,
    config: EvalConfig,
    wall: float,
) -> ChildResult:
    """CPU: the judge and a sandboxed executor share an arena and a socket (serve.py)."""
    from harness import arena

    arena_fd = arena.create(ARENA_BYTES)
    judge_end, serve_end = socket.socketpair()
    executor_dir = workdir.parent / "serve"  # not made: it runs in its own tmpfs
    blobs = {}
    for p in plans:
        for preset in p.get("presets", []):
            data = artifacts.read(artifacts.store(), preset["binary"])
            blobs[preset["binary"]] = base64.b64encode(data).decode()
    serve_job = {
        "source": candidate.source,
        "plans": plans,
        "blobs": blobs,
        "arena_fd": arena_fd,
        "socket_fd": serve_end.fileno(),
        "op_ref": config.op_ref,
        "interpreter": True,
    }
    served: list[ChildResult] = []
    spawned = threading.Event()

    def serve() -> None:
        served.append(
            run_child(
                "candidate_serve",
                serve_job,
                str(executor_dir),
                limits=config.limits,
                wall_s=wall,
                cuda=False,
                env_extra=_env(False),
                pass_fds=(arena_fd, serve_end.fileno()),
                started=spawned,
            )
        )

    thread = threading.Thread(target=serve, name="kf-serve", daemon=True)
    thread.start()
    spawned.wait(timeout=60)
    serve_end.close()  # the executor holds its end: its death is EOF to the judge
    job = {
        **job,
        "subject": {
            "kind": "remote",
            "plans": plans,
            "arena_fd": arena_fd,
            "socket_fd": judge_end.fileno(),
        },
    }
    try:
        res = _child(
            ev,
            "judge",
            job,
            workdir,
            config,
            False,
            wall=wall,
            trusted=True,
            pass_fds=(arena_fd, judge_end.fileno()),
        )
    finally:
        judge_end.close()
        os.close(arena_fd)
        thread.join(timeout=30)
    if served:
        # What the candidate's code printed: while recorded, then in the executor.
        shown = redact.output(served[0].output, executor_dir)
        ev.stdout_tail = f"{ev.stdout_tail}\n{shown}".strip() if ev.stdout_tail else shown
        ev.isolation = ev.isolation or served[0].isolation.to_dict()  # the recording's first
        ev.checks.setdefault("phase_wall_s", {})["candidate_serve"] = round(served[0].wall_s, 3)
        if served[0].status in (ChildStatus.TIMEOUT, ChildStatus.CRASH):
            error = res.result.get("error") or {}
            if error.get("kind") == "crash":
                error["detail"] = f"{error.get('detail', '')}: {served[0].error}"
    return res


def _timing_job(problem: Problem, config: EvalConfig, gpu: bool) -> dict[str, Any]:
    regime = config.regime
    if regime is None:
        raise ValueError("timing needs the regime evaluate() resolves")
    dev = "cuda" if gpu else "cpu"
    usable = applicable(problem.op, problem.layout, dev)
    wanted = (
        config.baselines
        if config.baselines is not None
        else (("torch",) if config.quick else usable)
    )
    names = tuple(n for n in wanted if n in usable) if config.time_candidate else ()
    lo, hi, rel = config.samples()
    return {
        "regime": str(regime),
        "baselines": list(names),
        "cublaslt_dir": _cublaslt_dir(gpu, names, config),
        "min_samples": lo,
        "max_samples": hi,
        "target_rel_err": rel,
        "server_gap_ms": config.server_gap_ms,
        "max_seconds": 30.0 if config.quick or not gpu else 120.0,
    }


def _rejected(ev: Evaluation) -> bool:
    return any(f.severity == "reject" for f in ev.findings)


def _read_judgement(
    ev: Evaluation, child: ChildResult, problem: Problem, config: EvalConfig, gpu: bool
) -> None:
    res = child.result
    compile_info = res.get("compile", {})
    if ev.checks.get("trusted_render") or not compile_info.get("ok", True):
        ev.compile = _compile_result(compile_info)
    if not ev.compile.ok:
        ev.verdict = Verdict.COMPILE_ERROR
        ev.error = ev.compile.log[-2000:]
        raise _Stop(ev)
    ev.checks["judge_s"] = res.get("phase_s", {})
    ev.findings += [Finding(**f) for f in res.get("findings", [])]
    ev.kernels = res.get("kernels", []) + res.get("aten_ops", [])
    error = res.get("error")
    if error and error["kind"] not in ("raised", "plan"):
        ev.verdict = (
            Verdict.CRASH if error["kind"] in ("cuda_fault", "crash") else Verdict.COMPILE_ERROR
        )
        ev.error = f"run() failed on case {error['case']}: {error['detail'][-1500:]}"
        if error["kind"] == "compile":
            ev.compile = dataclasses.replace(ev.compile, ok=False, log=error["detail"][-6000:])
        raise _Stop(ev)
    ev.stages = [
        StageResult(name, s["passed"], s["worst"], s["cases"], s["detail"])
        for name, s in sorted(res.get("stages", {}).items(), key=lambda kv: _stage_rank(kv[0]))
    ]
    if error:
        ev.verdict = Verdict.INCORRECT
        ev.error = f"run() failed on case {error['case']}: {error['detail'][-1500:]}"
        ev.stages.append(StageResult("run", False, None, 0, ev.error[:500]))
        raise _Stop(ev)
    failed = [s for s in ev.stages if not s.passed]
    if failed:
        ev.verdict = Verdict.INCORRECT
        ev.error = "; ".join(f"{s.name}: {s.detail}" for s in failed)
        raise _Stop(_finish(ev, time.monotonic()))
    if res.get("timing") and not _rejected(ev):
        _read_timing(ev, res, child.wall_s, problem, config)


def _read_timing(
    ev: Evaluation, res: dict, child_wall: float, problem: Problem, config: EvalConfig
) -> None:
    timed = res["timing"]
    recheck = res["recheck"]
    ev.stages.append(
        StageResult(
            "recheck_after_timing",
            recheck["passed"],
            recheck["worst"],
            recheck["checked"],
            recheck["detail"],
        )
    )
    if not recheck["passed"]:
        ev.verdict = Verdict.INCORRECT
        ev.error = f"recheck_after_timing: {recheck['detail']}"
    samples = timed["samples"]
    checks = _cross_checks(samples, timed, child_wall, ev)  # on the raw samples
    synced = {n: v["synced"] for n, v in samples.items()}
    plain = {n: v["plain"] for n, v in samples.items()}
    # What is reported is the plain end event: the device time of what was launched on the
    # timed stream. The synced event's tail charge existed against a candidate's host code
    # hiding work on other streams or threads; in the judge's process no candidate host code
    # runs (its plan is launched by our code on this one stream, and a kernel's child grids
    # finish before it does), and the tail charged an honest replay for the host's wake-up
    # after a sync: torch.matmul against itself read 0.91-0.98x that way (H200, 2026-11-27).
    # The tails stay in the record, and the side-stream cross-check still looks at them.
    _, tails = timing.reported_us(synced, plain, [n for n in samples if n != "candidate"])
    used = {name: plain[name] or s["host"] for name, s in samples.items()}
    stats = {name: timing.summarize(us) for name, us in used.items()}
    regime = config.regime or Regime.INTERPRETER
    timings = Timings(
        regime=regime,
        protocol=TIMING_PROTOCOL,
        candidate=stats["candidate"],
        baselines={n: st for n, st in stats.items() if n != "candidate"},
    )
    cand = used["candidate"]
    for name in timings.baselines:
        base = used[name]
        timings.speedups[name] = statistics.median(base) / statistics.median(cand)
        timings.speedup_ci[name] = timing.speedup_ci(base, cand)
    first = next(iter(timings.baselines), None)
    if first:
        lo_ci, hi_ci = timings.speedup_ci[first]
        timings.noise = (hi_ci - lo_ci) / 2 / timings.speedups[first]
    ev.timings = timings
    ev.checks = {**ev.checks, **checks, "sync_tail_us": tails}
    ev.checks["baseline_errors"] = timed.get("baseline_errors", {})
    if timed.get("preroll"):
        ev.checks["preroll"] = timed["preroll"]
    _roofline(ev, resolve_op(problem.op, config.op_ref), problem)


def _sanitize(
    ev: Evaluation,
    subject: dict,
    base_job: dict,
    problem: Problem,
    config: EvalConfig,
    gpu: bool,
    workdir: Path,
) -> None:
    """compute-sanitizer stage (harness/sanitizer.py) over the judge running the candidate at
    the smoke shape and one odd sweep shape. A reported error rejects as INCORRECT: an
    out-of-bounds or racy access is a wrong kernel that happened to produce the right values
    here (like a guard-band hit), not proof of intent to fool the timer."""
    if not gpu:
        ev.findings.append(Finding("sanitizer", "warn", "compute-sanitizer needs a GPU: skipped"))
        return
    job = {**base_job, "subject": subject, "seed": secrets.randbits(62)}
    reports = {}
    for tool in config.sanitize_tools:
        wall = _within_deadline(ev, config, f"sanitize_{tool}", 2 * config.limits.wall_s)
        rep = sanitizer.run(
            tool,
            job,
            str(workdir),
            limits=config.limits,
            wall_s=wall,
            **_child_io(gpu, trusted=True),  # the judge's own phase, under the tool
            deadline_at=config.deadline_at,
        )
        reports[tool] = rep.to_dict()
        if not rep.ran:
            ev.findings.append(
                Finding("sanitizer", "warn", f"{tool} did not run: {rep.note[-500:]}")
            )
            continue
        detail = "; ".join(rep.first_errors[:4]) if rep.errors else ""
        ev.stages.append(StageResult(f"sanitize_{tool}", rep.errors == 0, None, 1, detail[:500]))
        if rep.errors:
            ev.verdict = Verdict.INCORRECT
            ev.error = f"compute-sanitizer {tool}: {rep.errors} error(s): {detail[:1500]}"
    ev.checks["sanitizer"] = reports
    if ev.verdict is Verdict.INCORRECT:
        raise _Stop(ev)


def _stage_rank(name: str) -> int:
    return STAGE_ORDER.index(name) if name in STAGE_ORDER else len(STAGE_ORDER)


def _compile_result(info: dict) -> CompileResult:
    return CompileResult(
        ok=bool(info.get("ok")),
        log=str(info.get("log", ""))[-6000:],
        seconds=float(info.get("seconds", 0.0)),
        cached=bool(info.get("cached", False)),
        registers=info.get("registers"),
        spills=info.get("spills"),
        shared_mem_bytes=info.get("shared_mem_bytes"),
    )


def _cublaslt_dir(gpu: bool, names: tuple[str, ...], config: EvalConfig) -> str | None:
    """The cuBLASLt extension, built once per device and torch version (about a minute)."""
    if not gpu or "cublaslt" not in names:
        return None
    wall = 600.0
    if config.deadline_at is not None:
        wall = min(wall, config.deadline_at - time.monotonic())
        if wall < 1.0:
            return None
    import importlib.metadata

    build_dir = device_mod.cache_dir() / f"cublaslt-{importlib.metadata.version('torch')}"
    build_dir.mkdir(parents=True, exist_ok=True)
    # One build at a time (warm_up's side thread and an evaluation may both want it): the
    # builder holds the lock; the others wait for it, never past their deadline.
    with open(build_dir.parent / f".{build_dir.name}.lock", "w") as lock:
        until = time.monotonic() + wall
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= until:
                    return None
                time.sleep(0.5)
        if not list(build_dir.glob("*.so")):
            res = run_child(
                "build_cublaslt",
                {"build_dir": str(build_dir)},
                str(build_dir),
                limits=config.limits,
                wall_s=max(1.0, until - time.monotonic()),
                cuda=True,
                isolate_net=True,
                isolate_fs=True,
            )
            if res.status is not ChildStatus.OK:
                return None
    return str(build_dir)


def _cross_checks(samples: dict, res: dict, child_wall: float, ev: Evaluation) -> dict:
    """Side-stream (synced vs plain events), host timer vs events, and wall-clock sanity."""
    checks: dict = {"clocks": res.get("clocks")}
    state = res.get("gpu_state")
    if state:
        checks["gpu_state"] = state
        throttled = gpu_state.throttle_during(state.get("before", {}), state.get("after", {}))
        if throttled:
            # Warn only: the baselines ran interleaved under the same clocks, so the ratio
            # holds; the absolute times and % of roof are low.
            ev.findings.append(
                Finding(
                    "clock_throttle",
                    "warn",
                    f"GPU clocks were limited while timing: {', '.join(throttled)}",
                )
            )
    cand = samples["candidate"]
    if cand["synced"]:
        synced, plain = statistics.median(cand["synced"]), statistics.median(cand["plain"])
        overhead = statistics.median(
            [s - p for s, p in zip(cand["synced"], cand["plain"], strict=True)]
        )
        ref_overheads = [
            statistics.median([s - p for s, p in zip(v["synced"], v["plain"], strict=True)])
            for k, v in samples.items()
            if k != "candidate" and v["synced"]
        ]
        ref = min(ref_overheads) if ref_overheads else 0.0
        checks["side_stream"] = {
            "synced_us": synced,
            "plain_us": plain,
            "overhead_us": overhead,
            "baseline_overhead_us": ref,
        }
        if synced > 1.5 * plain and overhead - ref > 20.0:
            ev.findings.append(
                Finding(
                    "side_stream",
                    "reject",
                    f"work finished {overhead:.0f} us after run() returned on the timed stream "
                    f"(synced {synced:.1f} us vs plain events {plain:.1f} us): work on another stream or thread",
                )
            )
        host = statistics.median(cand["host"])
        checks["host_vs_events"] = {"host_us": host, "events_us": synced}
        # Only meaningful when the GPU queue was empty at the call (SERVER regime): with the
        # OFFLINE pre-roll the host also waits out queued refill and flush work.
        pre_rolled = bool((res.get("preroll") or {}).get("candidate"))
        if not pre_rolled and synced < 0.5 * host and host - synced > 100.0:
            ev.findings.append(
                Finding(
                    "timer_mismatch",
                    "reject",
                    f"events say {synced:.1f} us, the host clock {host:.1f} us",
                )
            )
    total_s = sum(sum(v["synced"] or v["host"]) for v in samples.values()) / 1e6
    checks["timed_total_s"] = total_s
    checks["child_wall_s"] = child_wall
    if child_wall and total_s > child_wall * 1.05:
        ev.findings.append(
            Finding(
                "timer_mismatch",
                "reject",
                f"reported {total_s:.2f} s of timed work in a {child_wall:.2f} s process",
            )
        )
    return checks


def _roofline(ev: Evaluation, op, problem: Problem) -> None:
    t = ev.timings
    if t is None:  # set by _read_timing before it calls this
        return
    secs = t.candidate.median_us / 1e6
    if secs <= 0:
        return
    flops, nbytes = op.flops(problem), op.bytes_moved(problem)
    ev.tflops = flops / secs / 1e12
    ev.gbps = nbytes / secs / 1e9
    for name, s in t.speedups.items():
        if s > 10.0:
            ev.findings.append(
                Finding(
                    "excessive_speedup", "warn", f"{s:.1f}x vs {name}: flagged for review (R1.8)"
                )
            )
    dev = ev.device
    if t.regime is Regime.INTERPRETER or dev is None or not dev.peak_gbps:
        return
    floor_s = dev.floor_s(flops, nbytes, problem.dtype)
    ev.pct_of_roof = 100.0 * floor_s / secs
    if secs < 0.9 * floor_s:
        ev.implausible = True
        ev.findings.append(
            Finding(
                "implausible",
                "warn",
                f"{secs * 1e6:.1f} us is below 0.9x the measured roof's floor {floor_s * 1e6:.1f} us: not ranked",
            )
        )
