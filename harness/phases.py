"""What a sandbox child does, by phase name: the dispatcher run inside every child.

The phases live on either side of the trust boundary, in separate packages:
  trusted    judge/session.py     judge: cases from secret seeds, the candidate's calls, its
                                  timing, then references and every check
             judge/tools.py       judge_sanitize, judge_profile: the judge under a GPU tool
             screen_child.py      screen_compile, screen_batch: renders of our own families
             ceilings, build_cublaslt: what the device can do; the cuBLASLt baseline
  untrusted  child/record.py      candidate_record: the candidate's plans, nothing launched
             child/serve.py       candidate_serve: the CPU executor on the judge's arena
             model/child.py       model_* (uploaded models)
"""

from __future__ import annotations

import os
from collections.abc import Callable

UNTRUSTED = frozenset({"candidate_record", "candidate_serve"})  # and every model_* phase


def is_untrusted(phase: str) -> bool:
    return phase in UNTRUSTED or phase.startswith("model_")


def _handler(phase: str) -> Callable[[dict], dict]:
    if phase.startswith("model_"):  # uploaded models: profile / end-to-end verify (issue 6)
        from harness.model.child import run_phase

        return lambda job: run_phase(phase, job)
    if phase.startswith("screen_"):
        from harness import screen_child

        return {
            "screen_compile": screen_child.compile_batch,
            "screen_batch": screen_child.screen_batch,
        }[phase]
    if phase == "candidate_record":
        from harness.child.record import candidate_record

        return candidate_record
    if phase == "candidate_serve":
        from harness.child.serve import candidate_serve

        return candidate_serve
    if phase == "judge":
        from harness.judge.session import judge

        return judge
    if phase in ("judge_sanitize", "judge_profile"):
        from harness.judge import tools

        return getattr(tools, phase)
    return {
        "ceilings": ceilings,
        "build_cublaslt": build_cublaslt,
        "selftest_env": selftest_env,
        "selftest_flood": selftest_flood,
        "selftest_sleep": selftest_sleep,
    }[phase]


def run(phase: str, job: dict, isolation: dict) -> dict:
    import torch

    handler = _handler(phase)
    if job.get("interpreter"):
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    return handler(job)


def ceilings(job: dict) -> dict:
    from harness import ceilings as ceil

    return ceil.measure(job)


def build_cublaslt(job: dict) -> dict:
    from harness.judge import cublaslt

    return cublaslt.build(job["build_dir"])


def selftest_env(job: dict) -> dict:
    return {
        "names": sorted(os.environ),
        "cwd": os.getcwd(),
        "home": os.environ.get("HOME"),
        "nice": os.nice(0),
    }


def selftest_sleep(job: dict) -> dict:
    import time

    time.sleep(job["seconds"])
    return {}


def selftest_flood(job: dict) -> dict:
    import sys

    chunk = "x" * 999 + "\n"
    for _ in range(job["bytes"] // 1000):
        sys.stdout.write(chunk)
    sys.stdout.flush()
    return {}
