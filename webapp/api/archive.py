"""A job's winning kernels as a zip: one folder per problem and a provenance manifest.

    <job-title-slug>/manifest.json
    <job-title-slug>/<op>-<shape>-<dtype>[-<layout>]/kernel.py

Each source is the candidate module exactly as the harness evaluated it (it defines
`run(*inputs, out)`); the manifest says where it came from and how it was measured.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from datetime import UTC, datetime
from typing import Any

from django.utils.text import slugify

from webapp.api.selectors import Winner
from webapp.jobs.models import Job, Problem

MANIFEST_VERSION = 1


def problem_folder(problem: Problem) -> str:
    parts = [problem.op, "x".join(str(s) for s in problem.shape), problem.dtype]
    if problem.layout:
        parts.append(problem.layout)
    return slugify("-".join(parts)) or f"problem-{problem.position}"


def winner_path(winner: Winner) -> str:
    return f"{problem_folder(winner.task.problem)}/kernel.py"


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
    evaluation = it.evaluation or {}
    return {
        "path": winner_path(winner),
        "sha256": hashlib.sha256(it.source.encode()).hexdigest(),
        "problem": {"key": problem.key, **problem.to_dict()},
        "task": winner.task.id,
        "iteration": {"seq": it.seq, "index": it.index, "candidate_id": it.candidate_id},
        "speedup": it.speedup,
        "interpreter": winner.interpreter,
        "ranked": not winner.interpreter,
        "family": it.family,
        "params": it.params,
        "device": evaluation.get("device"),
        "evaluation": evaluation,
        "hypothesis": it.hypothesis,
    }


def winners_zip(job: Job, winners: list[Winner], problems: list[Problem]) -> bytes:
    root = slugify(job.title) or str(job.id)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        document = manifest(job, winners, problems)
        archive.writestr(f"{root}/manifest.json", json.dumps(document, indent=2, sort_keys=True))
        for winner in winners:
            archive.writestr(f"{root}/{winner_path(winner)}", winner.iteration.source)
    return buffer.getvalue()
