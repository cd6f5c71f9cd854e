"""Inside the judge: turn the job's subject into something callable (subjects.py)."""

from __future__ import annotations

import time
from typing import Any

from harness import plan as P
from harness.judge.subjects import (
    CandidateFailure,
    RemoteExecutor,
    ReplayedPlans,
    Subject,
    TrustedRender,
)
from kernels.problem import Problem


def open_subject(job: dict) -> tuple[Subject, dict[str, Any]]:
    subject = job["subject"]
    kind = subject["kind"]
    device = job["device"]
    if kind == "render":
        return _render(job, subject, device)
    try:
        plans = [P.Plan.from_json(p) for p in subject["plans"]]
    except P.PlanError as exc:
        raise CandidateFailure("plan", f"the recorded plan is refused: {exc}") from exc
    info = {"ok": True, "log": "", "seconds": 0.0, "cached": bool(subject.get("cached"))}
    if kind == "plans":
        from harness.judge.binaries import GpuLauncher, launcher_folder

        launcher = GpuLauncher(subject["store"], launcher_folder(job["workdir"]))
        return ReplayedPlans(plans, launcher), info
    if kind == "remote":
        return RemoteExecutor(plans, subject["arena_fd"], subject["socket_fd"]), info
    raise ValueError(f"unknown subject kind {kind!r}")


def _render(job: dict, subject: dict, device: str) -> tuple[Subject, dict[str, Any]]:
    """Import a render of our own family, rendered again here: only our code is imported."""
    from harness import cuda_ext, runtime
    from harness.judge.trust import render
    from harness.redact import candidate_traceback

    problem = Problem.from_dict(subject["render_problem"])
    source = render(problem, subject["point"], job.get("op_ref", ""))
    if source is None or source != subject["source"]:
        raise ValueError("the judge was handed a source that is not the render it names")
    t0 = time.perf_counter()
    try:
        module = runtime.load_candidate(source, job["workdir"], "kf_render")
    except BaseException as exc:  # noqa: BLE001  (a build that failed at import)
        detail = candidate_traceback(exc, job["workdir"], limit=6000)
        raise CandidateFailure("compile", detail) from exc
    info = {"ok": True, "log": "", "seconds": time.perf_counter() - t0}
    info.update(cuda_ext.last_build_report())
    # The audit (one call under the CUDA profiler) only decides the vendor-library rule. Our
    # own render needs it only where the problem has that rule: starting the profiler is a
    # cost every verification would pay.
    audit = bool(job.get("forbid_vendor_library"))
    return TrustedRender(module, device, audit=audit), info
