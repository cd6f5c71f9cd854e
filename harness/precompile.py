"""Compile a candidate ahead of its evaluation, on the CPU cores, while the GPU times another.

A render of our own families (harness/judge/trust.py) is compiled the way the screen compiles
its points: a trusted child imports it and triggers its JIT compile-only at every shape the
evaluation will call it at (the config's cases and the timed one), into the trusted caches the
judge reads (harness/compile_cache.py). Anything else is recorded
ahead: the candidate_record phase in its sandbox, at exactly the shapes the evaluation will
use, launching nothing; the parent files the plans and cubins in the artifact store, where
the evaluation finds them (harness/judge/evaluation.py) and records nothing again.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.config import EvalConfig
from harness.results import Backend, Candidate

if TYPE_CHECKING:
    from kernels.problem import Problem


@dataclass(frozen=True)
class PrecompileResult:
    ok: bool
    seconds: float  # wall time of the precompile (the child's start-up included); 0 when cached
    error: str = ""  # why it failed: the import or compile traceback, or the sandbox's reason
    cache_key: str = ""
    cached: bool = False  # this source was precompiled before: no child ran
    # "" when ok; "compile": the candidate failed to import or a kernel failed to compile (an
    # evaluation would fail the same way); "raised": run() raised something else (not
    # conclusive); "timeout", "crash", "forged", "infra": the sandbox's.
    failure: str = ""
    compile_s: float = 0.0  # import + compile inside the child: JIT work done ahead
    files: int = 0  # blobs (cubins, presets) the recorded plans name; 0 for a render
    shapes: int = 0  # shapes it was compiled or recorded at (the evaluation's): 0 when cached

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


_NO_GPU = "CUDA C++ candidates need a GPU; none is visible"


def precompile(
    candidate: Candidate,
    problem: Problem,
    *,
    config: EvalConfig | None = None,
    build_without_gpu: bool = False,
) -> PrecompileResult:
    """Compile (a render) or record (anything else) the candidate in a sandbox, timing nothing.

    `build_without_gpu`: a render of a CUDA C++ family is built even where no GPU is visible
    (the kernel library built on a CPU machine with the GPU workers' nvcc, harness/library.py):
    its import runs nvcc, and nothing is called."""
    from harness import device as device_mod
    from harness.judge import artifacts, trust
    from harness.judge.evaluation import record_problems, run_problem
    from harness.ops import resolve_op

    config = config or EvalConfig(quick=True)
    started = time.monotonic()
    gpu = config.device != "cpu" and device_mod.gpu_visible()
    cuda_without_gpu = not gpu and candidate.backend is Backend.CUDA
    if cuda_without_gpu and not build_without_gpu:
        return PrecompileResult(False, 0.0, _NO_GPU, failure="compile")
    op = resolve_op(problem.op, config.op_ref)
    runs = run_problem(problem, gpu)
    shapes = [p.to_dict() for p in record_problems(op, runs, config, gpu)]
    key = artifacts.plans_key(candidate.source, shapes, "cuda" if gpu else "cpu")
    marker = artifacts.store() / "precompiled" / key
    if marker.is_file():
        return PrecompileResult(True, 0.0, cache_key=key, cached=True)
    point = trust.trusted_point(candidate, problem, config.op_ref)
    if point is not None:
        result = _compile_render(candidate, problem, point, config, gpu, key, shapes)
    elif cuda_without_gpu:  # only our own render is built where nothing can record it
        return PrecompileResult(False, 0.0, _NO_GPU, failure="compile")
    else:
        result = _record(candidate, shapes, config, gpu, key)
    result = dataclasses.replace(result, seconds=time.monotonic() - started)
    if result.ok:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"compile_s": result.compile_s, "problem": problem.key}))
    return result


def _compile_render(
    candidate: Candidate,
    problem: Problem,
    point: dict,
    config: EvalConfig,
    gpu: bool,
    key: str,
    shapes: list[dict],
) -> PrecompileResult:
    """The screen's compile phase over this one point (trusted: our render), at every shape the
    evaluation will call it at (a full verification's sweep adds specializations the screen
    never compiled: the judge would compile them inside its time)."""
    from harness.compile_cache import trusted_dirs, trusted_env
    from harness.sandbox import ChildStatus, run_child, scratch

    root = Path(scratch.make("pre"))
    progress = root / "progress.jsonl"
    try:
        job = {
            "problem": problem.to_dict(),
            "op_ref": config.op_ref,
            "device": "cuda" if gpu else "cpu",
            "interpreter": not gpu,
            "workdir": str(root),
            "progress_path": str(progress),
            "points": [{**point, "candidate_id": candidate.id}],
            "shapes": shapes,
        }
        res = run_child(
            "screen_compile",
            job,
            str(root),
            limits=config.limits,
            wall_s=config.limits.wall_s + config.compile_wall_s,
            cuda=gpu,
            isolate_fs=False,  # it writes the shared trusted caches
            writable=trusted_dirs(),
            env_extra=trusted_env(gpu),
            background=True,  # compiled ahead while the GPU times another
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if res.status is not ChildStatus.OK:
        return PrecompileResult(
            False,
            0.0,
            f"precompile: {res.error}\n{res.output[-1500:]}",
            key,
            failure=res.status.value,
        )
    (done,) = res.result.get("results") or [{"ok": False, "log": "no result"}]
    return PrecompileResult(
        bool(done.get("ok")),
        0.0,
        str(done.get("log", ""))[-6000:],
        key,
        failure="" if done.get("ok") else str(done.get("failure") or "compile"),
        compile_s=float(done.get("seconds", 0.0)),
        shapes=int(done.get("shapes", 0)),
    )


def _record(
    candidate: Candidate, shapes: list[dict], config: EvalConfig, gpu: bool, key: str
) -> PrecompileResult:
    """The candidate_record phase ahead of time; its plans filed under the evaluation's key."""
    from harness.judge import recording
    from harness.sandbox import ChildStatus

    rec = recording.record(candidate, shapes, config, gpu, background=True)
    child = rec.child
    if child is not None and child.status is not ChildStatus.OK:
        why = f"precompile: {child.error}\n{child.output[-1500:]}"
        return PrecompileResult(False, 0.0, why, key, failure=child.status.value)
    if not rec.compile.ok:
        return PrecompileResult(
            False, 0.0, rec.compile.log, key, failure="compile", compile_s=rec.compile.seconds
        )
    if rec.plans is None:
        error = rec.error or {"kind": "contract", "detail": ""}
        failure = "raised" if error["kind"] == "raised" else "compile"
        return PrecompileResult(
            False, 0.0, error["detail"], key, failure=failure, compile_s=rec.compile.seconds
        )
    blobs = {b for p in rec.plans for b in _binaries(p)}
    return PrecompileResult(
        True, 0.0, "", key, compile_s=rec.compile.seconds, files=len(blobs), shapes=len(shapes)
    )


def _binaries(plan: dict) -> set[str]:
    found = {k.get("binary") for k in plan.get("kernels", []) if k.get("binary")}
    return found | {p.get("binary") for p in plan.get("presets", [])}
