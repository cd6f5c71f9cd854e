"""A download's provenance manifest, and where each winning source lies in the package.

The download itself is an installable Python package built by builder.py (one builder for the
API and the web pages):

    kf-<job-title-slug>/manifest.json
    kf-<job-title-slug>/kf_<job_title_slug>/kernels/k_<op>_<shape>_<dtype>[_<layout>].py

Each source is the candidate module exactly as the harness evaluated it (it defines
`run(*inputs, out)`); the manifest says where it came from and how it was measured.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from django.utils.text import slugify

from webapp.jobs.models import Job, Problem
from webapp.jobs.selectors import Winner, best_baseline

MANIFEST_VERSION = 1


def problem_folder(problem: Problem) -> str:
    parts = [problem.op, "x".join(str(s) for s in problem.shape), problem.dtype]
    if problem.layout:
        parts.append(problem.layout)
    return slugify("-".join(parts)) or f"problem-{problem.position}"


def kernel_module(problem: Problem) -> str:
    """The kernel's module name inside the package (an identifier)."""
    return "k_" + problem_folder(problem).replace("-", "_")


def winner_path(winner: Winner) -> str:
    """Where the source lies inside the package folder of the download."""
    return f"kernels/{kernel_module(winner.task.problem)}.py"


def manifest(job: Job, winners: list[Winner], problems: list[Problem]) -> dict[str, Any]:
    won = {w.task.problem_id for w in winners}
    return {
        "manifest_version": MANIFEST_VERSION,
        "generated_at": datetime.now(UTC).isoformat(),
        "job": {
            "id": str(job.id),
            "title": job.title,
            "team": job.team.slug,
            "status": job.status,
            "created_at": job.created_at.isoformat(),
            "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        },
        "winners": [_winner_entry(w) for w in winners],
        "problems_without_winner": [p.key for p in problems if p.id not in won],
    }


def _winner_entry(winner: Winner) -> dict[str, Any]:
    it, problem = winner.iteration, winner.task.problem
    evaluation = it.measurement
    return {
        "path": winner_path(winner),
        "sha256": hashlib.sha256(it.source.encode()).hexdigest(),
        "problem": {"key": problem.key, **problem.to_dict()},
        "task": winner.task.id,
        "iteration": {"seq": it.seq, "index": it.index, "candidate_id": it.candidate_id},
        "speedup": it.speedup,
        "best_baseline": _best_baseline(evaluation),
        "ranked": it.ranked,
        "family": it.family,
        "params": it.params,
        "device": evaluation.get("device"),
        "evaluation": it.evaluation,
        "final_evaluation": it.final_evaluation,
        "hypothesis": it.hypothesis,
    }


def _best_baseline(evaluation: dict[str, Any]) -> dict[str, Any] | None:
    best = best_baseline(evaluation)
    return {"name": best.baseline, "speedup": best.speedup} if best else None
