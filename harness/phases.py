"""What a sandbox child does, by phase name: the dispatcher run inside every child.

The phases live on either side of the trust boundary, in separate modules:
  trusted    oracle_phases.py     oracle_prepare, oracle_check, oracle_recheck, ceilings,
                                  build_cublaslt: never import candidate code
             screen_child.py      screen_compile, screen_batch: only renders of our own
                                  families (harness/screen.py), never an LLM's source
  untrusted  candidate_phases.py  candidate_cases, candidate_time, candidate_sanitize,
                                  candidate_precompile, profile_target
             model/child.py       model_* (uploaded models)
"""

from __future__ import annotations

import os

import torch

from harness import candidate_phases, oracle_phases


def run(phase: str, job: dict, isolation: dict) -> dict:
    if phase.startswith("model_"):  # uploaded models: profile / end-to-end verify (issue 6)
        from harness.model.child import run_phase

        return run_phase(phase, job)
    if phase.startswith("screen_"):
        from harness import screen_child

        handler = {
            "screen_compile": screen_child.compile_batch,
            "screen_batch": screen_child.screen_batch,
        }[phase]
    else:
        handler = {
            "oracle_prepare": oracle_phases.oracle_prepare,
            "oracle_check": oracle_phases.oracle_check,
            "oracle_recheck": oracle_phases.oracle_recheck,
            "ceilings": oracle_phases.ceilings,
            "build_cublaslt": oracle_phases.build_cublaslt,
            "candidate_cases": candidate_phases.candidate_cases,
            "candidate_time": candidate_phases.candidate_time,
            "profile_target": candidate_phases.profile_target,
            "candidate_sanitize": candidate_phases.candidate_sanitize,
            "candidate_precompile": candidate_phases.candidate_precompile,
            "selftest_env": selftest_env,
            "selftest_flood": selftest_flood,
        }[phase]
    if job.get("interpreter"):
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    return handler(job)


def selftest_env(job: dict) -> dict:
    return {"names": sorted(os.environ), "cwd": os.getcwd(), "home": os.environ.get("HOME")}


def selftest_flood(job: dict) -> dict:
    import sys

    chunk = "x" * 999 + "\n"
    for _ in range(job["bytes"] // 1000):
        sys.stdout.write(chunk)
    sys.stdout.flush()
    return {}
