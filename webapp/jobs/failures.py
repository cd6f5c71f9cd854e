"""Why a job failed, the same everywhere (its page, the API's job resource, `kforge status`):
the stage, one sentence, and the tail of the traceback with the server's paths taken out.

A traceback names files on the worker (the checkout, the virtualenv, the sandbox's scratch
folder): a user needs the file and the line, not where we keep them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings

from webapp.jobs.models import Job, ModelRun, Task

TRACEBACK_LINES = 20  # the tail kept: the user's frame and the error are at the end

_PATH = re.compile(r"(?<![\w.])/(?:[^\s\"':,()]+/)*([^\s\"':,()/]+)")


def scrub_paths(text: str) -> str:
    """Absolute paths shortened to what a user can read: a file of the project or a package
    by its path inside it ("harness/model/child.py", "torch/nn/modules/module.py"), anything
    else (the sandbox's copy of the model, temporary files) by its name."""
    root = str(settings.BASE_DIR).rstrip("/") + "/"

    def short(match: re.Match[str]) -> str:
        path = match.group(0)
        for marker in ("/site-packages/", "/dist-packages/"):
            if marker in path:
                return path.split(marker, 1)[1]
        if path.startswith(root):
            return path[len(root) :]
        return match.group(1)

    return _PATH.sub(short, text)


@dataclass(frozen=True)
class JobFailure:
    stage: str  # "profile", "verify" (a model job's checks) or "optimize <problem>"
    message: str  # one line
    traceback: str  # the scrubbed tail ("" when there was none)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def describe(text: str) -> tuple[str, str]:
    """(one line, the scrubbed traceback tail) of a stored message or error."""
    text = scrub_paths(text.strip())
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return "", ""
    if len(lines) == 1:
        return lines[0], ""
    # The first line says what failed ("The model's forward pass raised an error:"); the last
    # is the exception itself.
    first, last = lines[0].rstrip(":"), lines[-1].strip()
    one_line = last if first.startswith("Traceback") else f"{first}: {last}"
    return one_line, "\n".join(lines[-TRACEBACK_LINES:])


def job_failure(*, job: Job) -> JobFailure | None:
    """Why a failed job failed; None for any other job."""
    if job.status != Job.Status.FAILED:
        return None
    run = ModelRun.objects.filter(job=job).first()
    if run is not None and run.status == ModelRun.Status.FAILED:
        # A run fails in its profile (no plan yet) or in its end-to-end check.
        stage = "verify" if run.plan else "profile"
        failure = (run.profile or {}).get("failure")
        if failure:
            stage = f"{stage} ({failure})"
        message, tail = describe(run.message or "no message was recorded")
        return JobFailure(stage=stage, message=message, traceback=tail)
    task = (
        Task.objects.filter(job=job, status=Task.Status.FAILED)
        .select_related("problem")
        .order_by("id")
        .first()
    )
    if task is not None:
        message, tail = describe(task.error or "no error was recorded")
        return JobFailure(stage=f"optimize {task.problem.key}", message=message, traceback=tail)
    return JobFailure(stage="", message="the job failed without a recorded reason", traceback="")
