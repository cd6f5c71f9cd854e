"""Compile a candidate ahead of its evaluation, and keep compiled kernels by source hash.

An optimizer compiles the next candidates on the CPU cores while the GPU times another. A
precompile is one sandboxed child (phase "candidate_precompile", the same lock-down as every
candidate phase) that imports the candidate and triggers its JIT at the shapes the quick
correctness stage will call, without timing anything. On a GPU every Triton launch is turned
into a compile-only warmup, so a precompile puts no kernel on the GPU that another process is
timing; under the CPU interpreter there is nothing to compile and the call simply runs.

Compiled kernels land in the compile cache (harness/compile_cache.py), keyed by the source's
hash, so the evaluation that follows loads them instead of compiling. The child's side is
`candidate_phases.candidate_precompile`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.compile_cache import (
    cache_key,
    count_files,
    cuda_ext_dir,
    keep_cache,
    keep_cuda_builds,
    key_dir,
    seed_cache,
)
from harness.config import EvalConfig
from harness.results import Backend, Candidate

if TYPE_CHECKING:
    from kernels.problem import Problem

_OK_MARKER = "precompiled.json"


@dataclass(frozen=True)
class PrecompileResult:
    ok: bool
    seconds: float  # wall time of the precompile (the child's start-up included); 0 when cached
    error: str = ""  # why it failed: the import or compile traceback, or the sandbox's reason
    cache_key: str = ""
    cached: bool = False  # this source was precompiled before: no child ran
    # "" when ok; "compile": the candidate failed to import or a kernel failed to compile (an
    # evaluation would fail the same way); "raised": run() raised something else during the
    # compile-only call (not conclusive); "timeout", "crash", "forged", "infra": the sandbox's.
    failure: str = ""
    compile_s: float = 0.0  # import + compile-only calls inside the child: JIT work done ahead
    files: int = 0  # compile-cache files kept under the key after this precompile

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def precompile(
    candidate: Candidate, problem: Problem, *, config: EvalConfig | None = None
) -> PrecompileResult:
    """Import the candidate and compile its kernels in a sandbox, timing nothing."""
    from harness import device as device_mod
    from harness.cases import fits_interpreter, pick_sweep, shrink
    from harness.ops import resolve_op
    from harness.sandbox import ChildStatus, run_child, scratch
    from kernels.problem import Problem

    config = config or EvalConfig(quick=True)
    started = time.monotonic()
    gpu = config.device != "cpu" and device_mod.gpu_visible()
    key = cache_key(candidate, gpu=gpu)
    marker = key_dir(key) / _OK_MARKER
    if marker.is_file():
        return PrecompileResult(True, 0.0, cache_key=key, cached=True, files=count_files(key))
    if not gpu and candidate.backend is Backend.CUDA:
        return PrecompileResult(
            False,
            0.0,
            "CUDA C++ candidates need a GPU; none is visible",
            key,
            failure="compile",
        )
    op = resolve_op(problem.op, config.op_ref)
    run_problem = problem
    if not gpu:
        if problem.dtype == "bf16":  # as evaluate(): the interpreter gets bf16 wrong
            run_problem = Problem(problem.op, problem.shape, "fp16", problem.layout)
        if not fits_interpreter(run_problem):
            run_problem = shrink(run_problem)
    shapes = [run_problem, *pick_sweep(op, run_problem, quick=True, interpreter=not gpu)]
    root = Path(scratch.make("pre"))
    try:
        workdir = root / "sandbox"
        workdir.mkdir()
        seed_cache(workdir, candidate, gpu=gpu)
        job = {
            "problem": run_problem.to_dict(),
            "shapes": [p.to_dict() for p in shapes],
            "op_ref": config.op_ref,
            "device": "cuda" if gpu else "cpu",
            "interpreter": not gpu,
            "source": candidate.source,
            "backend": str(candidate.backend),
            "workdir": str(workdir),
        }
        env = {"KF_COMPILE_CACHE": str(cuda_ext_dir())}
        if not gpu:
            env["TRITON_INTERPRET"] = "1"
        wall = config.limits.wall_s + (
            config.compile_wall_s if candidate.backend is Backend.CUDA else 0
        )
        res = run_child(
            "candidate_precompile",
            job,
            str(workdir),
            limits=config.limits,
            wall_s=wall,
            cuda=gpu,
            isolate_net=config.network_isolation,
            isolate_fs=config.fs_isolation,
            env_extra=env,
        )
        files = keep_cache(workdir, candidate, gpu=gpu)
        if gpu:
            keep_cuda_builds(workdir)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    seconds = time.monotonic() - started
    if res.status is not ChildStatus.OK:
        why = {
            ChildStatus.TIMEOUT: "timeout",
            ChildStatus.CRASH: "crash",
            ChildStatus.FORGED: "forged",
            ChildStatus.INFRA: "infra",
        }[res.status]
        return PrecompileResult(
            False, seconds, f"precompile: {res.error}\n{res.output[-1500:]}", key, failure=why
        )
    info = res.result
    if not info.get("ok"):
        return PrecompileResult(
            False,
            seconds,
            str(info.get("log", ""))[-6000:],
            key,
            failure=str(info.get("failure") or "compile"),
            compile_s=float(info.get("seconds", 0.0)),
            files=files,
        )
    key_dir(key).mkdir(parents=True, exist_ok=True)
    compile_s = float(info.get("seconds", 0.0))
    marker.write_text(json.dumps({"compile_s": compile_s, "problem": problem.key}))
    return PrecompileResult(True, seconds, "", key, compile_s=compile_s, files=files)
