"""profile(): Nsight Compute on exactly the candidate's launches inside one NVTX range (R6.1).

ncu wraps the judge (phase judge_profile, harness/judge/tools.py), which runs the candidate
the one way it runs on a GPU (our render, or its recorded plans launched by our code), warms
it up outside the range and calls it once inside it. No candidate host code runs under ncu.
Only candidates that passed evaluate() should be profiled (R3.8). The network namespace and
Landlock stay off here: ncu's injected library talks to the ncu front-end process. The view
and namespaces wrap ncu (front end and child share them; the report folder is writable); if
ncu writes no report that way, it runs once more without them (logged).
"""

from __future__ import annotations

import glob
import logging
import os
import secrets
import shutil
import time
from pathlib import Path

from harness import device as device_mod
from harness import ncu
from harness.compile_cache import trusted_dirs, trusted_env
from harness.config import EvalConfig
from harness.ops import resolve_op
from harness.results import Bottleneck, Candidate, Profile
from harness.sandbox import ChildStatus, run_child, scratch
from kernels.problem import Problem

NVTX_RANGE = "kf_candidate"
_log = logging.getLogger(__name__)


def find_ncu() -> str | None:
    found = shutil.which("ncu") or next(
        iter(
            sorted(
                glob.glob("/usr/local/cuda*/bin/ncu")
                + glob.glob("/opt/nvidia/nsight-compute/*/ncu")
            )
        ),
        None,
    )
    return found


def _ncu_dirs() -> tuple[str, ...]:
    """Where ncu's front end and its sections live: the CUDA toolkit's `ncu` is a launcher
    that looks for nsight-compute under the toolkit or /opt/nvidia (inside the view it found
    neither on the H200 image, 2026-11-27: "Nsight Compute is not installed")."""
    tool = find_ncu()
    if not tool:
        return ()
    found = [os.path.dirname(os.path.realpath(tool))]
    found += glob.glob("/opt/nvidia/nsight-compute*") + glob.glob("/opt/nvidia/nsight_compute*")
    return tuple(dict.fromkeys(found))


def ncu_command(report: str, *, full: bool = False) -> list[str]:
    tool = find_ncu() or "ncu"
    cmd = [tool, "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", "--clock-control", "none"]
    cmd += ["--target-processes", "all", "-f", "-o", report]
    if full:
        cmd += ["--set", "full"]
    else:
        for section in ncu.SECTIONS:
            cmd += ["--section", section]
        cmd += ["--metrics", ",".join(ncu.EXTRA_METRICS)]
    return cmd


def profile(
    candidate: Candidate,
    problem: Problem,
    *,
    config: EvalConfig | None = None,
    full: bool = False,
    report_dir: str | None = None,
) -> Profile:
    config = config or EvalConfig()
    resolve_op(problem.op, config.op_ref).validate(problem)
    prof = Profile(candidate.id, problem.key, {}, Bottleneck.UNKNOWN, clock_control="none")
    if not device_mod.gpu_visible() or config.device == "cpu":
        prof.error = "profiling needs a GPU: none is visible"
        return prof
    if find_ncu() is None:
        prof.error = "Nsight Compute (ncu) is not installed"
        return prof
    out_dir = Path(report_dir or device_mod.cache_dir() / "profiles")
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{candidate.id}-{problem.key.replace('/', '_')}"
    report = str(out_dir / stem)
    Path(report + ".ncu-rep").unlink(missing_ok=True)  # only this run's report counts
    # The run's deadline (EvalConfig.deadline_s) caps both tries together.
    deadline = config.deadline_s if config.deadline_s is not None else float("inf")
    ends_at = time.monotonic() + deadline
    from harness.judge.evaluation import subject_for

    subject, why = subject_for(candidate, problem, config, gpu=True)
    if subject is None:
        prof.error = f"cannot profile it: {why}"
        return prof
    for isolate_ns in (True, False):
        workdir = scratch.make("prof")
        try:
            job = {
                "problem": problem.to_dict(),
                "op_ref": config.op_ref,
                "device": "cuda",
                "subject": subject,
                "workdir": workdir,
                "seed": secrets.randbits(62),
                "nvtx": NVTX_RANGE,
            }
            res = run_child(
                "judge_profile",
                job,
                workdir,
                limits=config.limits,
                wall_s=min(
                    config.limits.wall_s + config.compile_wall_s, ends_at - time.monotonic()
                ),
                cuda=True,
                isolate_net=False,
                isolate_fs=False,
                isolate_ns=isolate_ns,
                writable=(str(out_dir), *trusted_dirs()),
                readable=(*_ncu_dirs(), str(device_mod.cache_dir())),
                env_extra=trusted_env(True),
                wrapper=ncu_command(report, full=full),
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if os.path.exists(report + ".ncu-rep") or res.status is ChildStatus.TIMEOUT:
            break
        if ends_at - time.monotonic() <= 1.0:
            break
        _log.warning("ncu wrote no report with isolate_ns=%s: %s", isolate_ns, res.error)
    path = report + ".ncu-rep"
    if res.status is not ChildStatus.OK or not os.path.exists(path):
        prof.error = f"ncu run failed ({res.status}): {res.error}\n{res.output[-3000:]}"
        return prof
    return from_report(path, candidate.id, problem.key, nvtx=f"{NVTX_RANGE}/")


def from_report(path: str, candidate_id: str, problem_key: str, nvtx: str | None = None) -> Profile:
    """Build a Profile from a .ncu-rep (also usable on a CPU-only machine)."""
    kernels = ncu.read_report(path, nvtx)
    metrics = ncu.combine(kernels)
    main = max(kernels, key=lambda k: k.metrics.get("duration_ns") or 0.0) if kernels else None
    limiter = ncu.limiter(metrics)
    if limiter is not None:
        metrics["occupancy_limiter"] = float(ncu.LIMITERS.index(limiter))
    prof = Profile(
        candidate_id=candidate_id,
        problem_key=problem_key,
        metrics=metrics,
        bottleneck=ncu.classify(metrics),
        stalls=main.stalls[:5] if main else [],
        rules=main.rules if main else [],
        kernels=[k.name for k in kernels],
        report_path=path,
        clock_control="none",
    )
    if not kernels:
        prof.error = "no kernel was recorded inside the NVTX range"
    return prof


def digest(prof: Profile) -> str:
    """The compact, stable text the LLM sees (R6.4)."""
    m = prof.metrics

    def f(key: str, unit: str = "%") -> str:
        v = m.get(key)
        return "n/a" if v is None else f"{v:.1f}{unit}"

    limiter = m.get("occupancy_limiter")
    lines = [
        f"bottleneck: {prof.bottleneck.value}; kernels: {', '.join(prof.kernels[:3])}",
        f"SOL compute {f('sm_pct')}, memory {f('memory_pct')}, DRAM {f('dram_pct')}, "
        f"L2 hit {f('l2_hit_pct')}, tensor pipe {f('tensor_pipe_pct')}",
        f"occupancy achieved {f('achieved_occupancy_pct')} of theoretical {f('theoretical_occupancy_pct')}"
        + (f", limited by {ncu.LIMITERS[int(limiter)]}" if limiter is not None else ""),
        f"registers/thread {f('registers_per_thread', '')}, spills {f('spill_requests', '')}",
        "top stalls: " + ", ".join(f"{r} {v:.2f}" for r, v in prof.stalls[:3]),
    ]
    for rule in prof.rules:
        if rule.get("est_speedup_pct"):
            lines.append(
                f"- {rule['title']}: {rule['message'][:300]} (est. {rule['est_speedup_pct']:.0f}%)"
            )
    return "\n".join(lines)
