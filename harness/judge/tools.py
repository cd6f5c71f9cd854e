"""Phases that run the judge under a GPU tool: compute-sanitizer and Nsight Compute.

The tool wraps the judge, which runs the candidate the one way it ever runs on a GPU: our
render in-process, or its recorded plans launched by our code. No candidate host code is
under the tool either.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from harness.judge import oracle
from harness.judge.sanitizer import shapes
from harness.judge.session import GUARD, place
from harness.ops import resolve_op
from kernels.problem import Problem


def _bind(subject, op, problem: Problem, seed: int) -> torch.Tensor:
    """Inputs and a poisoned, guarded output where the subject's buffers live; bound, and
    prepare() run. Returns the output."""
    spec = op.output_spec(problem)
    n = oracle.spec_numel(spec.shape)
    inputs = [place(subject, t) for t in op.make_inputs(problem, seed=seed, device="cpu")]
    padded = subject.empty_strided((2 * GUARD + n,), (1,), spec.dtype)
    out = padded[GUARD : GUARD + n].view(spec.shape)
    out.fill_(float("nan"))
    subject.bind(problem, inputs, out, prepare=True)
    return out


def _run(subject, op, problem: Problem, seed: int, calls: int) -> None:
    _bind(subject, op, problem, seed)
    for _ in range(calls):
        subject.call()
        if subject.device == "cuda":
            torch.cuda.synchronize()


def judge_sanitize(job: dict) -> dict[str, Any]:
    """prepare() and two calls at the smoke shape and one odd sweep shape; the tool's log (a
    parent-owned file) decides. Reports how many calls finished (a clean log of none proves
    nothing)."""
    from harness.judge.open import open_subject
    from harness.judge.subjects import CandidateFailure

    problem = Problem.from_dict(job["problem"])
    op = resolve_op(problem.op, job.get("op_ref", ""))
    calls = 0
    phase_s: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        subject, _ = open_subject(job)
        phase_s["open"] = round(time.perf_counter() - t0, 3)
        for i, p in enumerate(shapes(op, problem)):
            t0 = time.perf_counter()
            _run(subject, op, p, job["seed"] + i, 2)
            phase_s[f"calls_{i}"] = round(time.perf_counter() - t0, 3)
            calls += 2
    except CandidateFailure as failure:
        return {"calls": calls, "error": failure.detail[-2000:], "phase_s": phase_s}
    except Exception as exc:  # noqa: BLE001  (the tool's log says what went wrong)
        return {"calls": calls, "error": f"{type(exc).__name__}: {exc}"[-2000:]}
    shapes_run = ["x".join(map(str, p.shape)) for p in shapes(op, problem)]
    return {"calls": calls, "shapes": shapes_run, "phase_s": phase_s}


def judge_profile(job: dict) -> dict[str, Any]:
    """Warm up outside the NVTX range, then exactly one call inside it (R6.1)."""
    from harness.judge.open import open_subject

    problem = Problem.from_dict(job["problem"])
    op = resolve_op(problem.op, job.get("op_ref", ""))
    subject, info = open_subject(job)
    _run(subject, op, problem, job["seed"], 3)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(job["nvtx"])  # exactly the candidate's launches inside
    subject.call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return {"compile": info}
