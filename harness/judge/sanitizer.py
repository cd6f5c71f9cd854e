"""compute-sanitizer on a candidate's smoke case (opt-in: EvalConfig(sanitize=True)).

Why: an out-of-bounds *read* changes no output and no guard band, and inside PyTorch's caching
allocator it lands in memory the process owns, so no value check and no CUDA fault can see it;
on other shapes or another allocator state it reads garbage or faults. memcheck (and racecheck
for shared-memory hazards) sees every access. The agents run it when re-verifying a final best.

How: the judge_sanitize phase (harness/judge/tools.py: the judge runs the candidate at the
smoke shape and one odd sweep shape, prepare() and two calls) runs as a child wrapped by
compute-sanitizer, with PYTORCH_NO_CUDA_MEMORY_CACHING=1 so
each tensor is its own cudaMalloc and reading past one is an error memcheck reports. The
report goes to a log file in a parent-owned folder (not the candidate's stdout, which it
controls). Same sandbox rules as every candidate phase first: the namespaces (PID, mount with
the private view, IPC, network) are made *around* the tool, so its front end and the injected
library in the child share them. If the tool did not attach (no summary, or no finished calls,
within ATTACH_WALL_S), the next run drops the PID/mount/IPC namespaces, then the network
namespace, then Landlock. The level used is recorded; the environment allow-list, cgroup,
rlimits and wall clock always apply.

Known limit: the candidate can notice it is being sanitized (LD_PRELOAD/injection variables,
slow launches) and behave differently; this catches bugs, not a determined cheat.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.config import Limits
from harness.sandbox import ChildResult, ChildStatus, run_child, scratch

ERROR_EXIT_CODE = 86
# (PID/mount/IPC namespaces with the private view, network namespace, Landlock) from strictest
# to loosest. All namespaces wrap the tool, not only the child: on the H200 (2026-11-22) the
# child's own unshare (inside the tool) left the tool hanging for minutes, as if the library
# could not reach its front end from inside a new namespace.
ISOLATION_LADDER = (
    (True, True, True),
    (False, True, True),
    (False, False, True),
    (False, False, False),
)
# Attempts that may fail to attach get a shorter wall clock; the last one gets the full one.
ATTACH_WALL_S = 120.0
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:.*?\((\d+)\s+error")


@dataclass
class SanitizerReport:
    tool: str
    ran: bool  # the tool attached and printed its summary
    errors: int = 0
    first_errors: list[str] = field(default_factory=list)
    isolation: str = ""  # "namespaces+netns+landlock", "netns+landlock", "landlock", "none"
    note: str = ""  # why it did not run, or what else happened (timeout, child error)
    wall_s: float = 0.0
    # Inside the child under the tool: opening the subject, then the calls; the rest of
    # wall_s is the tool's and the child's start-up.
    phase_s: dict[str, float] = field(default_factory=dict)
    log_tail: str = ""  # the tool's own log, last lines

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def shapes(op, problem):
    """The shapes it runs at: the problem and a mid-sized odd one of its sweep."""
    odd = [p for p in op.sweep(problem) if p != problem and any(s % 2 for s in p.shape)]
    return [problem, *odd[len(odd) // 2 :][:1]]


def find_tool() -> str | None:
    return shutil.which("compute-sanitizer") or next(
        iter(
            sorted(
                glob.glob("/usr/local/cuda*/bin/compute-sanitizer")
                + glob.glob("/usr/local/cuda*/compute-sanitizer/compute-sanitizer")
            )
        ),
        None,
    )


def command(tool_path: str, tool: str, log_path: str) -> list[str]:
    cmd = [tool_path, "--tool", tool, "--log-file", log_path, "--print-limit", "20"]
    cmd += ["--error-exitcode", str(ERROR_EXIT_CODE), "--target-processes", "all"]
    if tool == "memcheck":
        cmd += ["--leak-check", "no"]  # the process exits without freeing: not the kernel's bug
    return cmd


def parse_log(text: str) -> tuple[int | None, list[str]]:
    """(error count, first error lines); count None when no summary line (tool did not run)."""
    counts = [int(m.group(1)) for m in _SUMMARY.finditer(text)]
    counts += [int(m.group(1)) for m in _RACE_SUMMARY.finditer(text)]
    lines = []
    for raw in text.splitlines():
        line = raw.strip().lstrip("=").strip()
        if not line or "SUMMARY" in line or line.startswith(("COMPUTE-SANITIZER", "Saved host")):
            continue
        if line.startswith(
            ("Invalid", "Error", "Race reported", "Program hit", "Warning", "Hazard")
        ):
            lines.append(line[:300])
        elif lines and len(lines) < 12 and line.startswith(("at ", "by thread", "Address")):
            lines.append(line[:300])  # the kernel name / address of the error just above
        if len(lines) >= 12:
            break
    return (max(counts) if counts else None), lines


def run(
    tool: str,
    job: dict,
    workdir: str,
    *,
    limits: Limits,
    wall_s: float,
    readable: tuple[str, ...],
    writable: tuple[str, ...],
    env_extra: dict[str, str],
    deadline_at: float | None = None,
) -> SanitizerReport:
    """Run the judge_sanitize phase under `compute-sanitizer --tool <tool>`, with what every
    trusted child reads and writes (`readable`, `writable`: the artifact store, the compile
    caches); every try of the isolation ladder ends by `deadline_at` (time.monotonic()) when
    one is given."""
    tool_path = find_tool()
    if tool_path is None:
        return SanitizerReport(tool, ran=False, note="compute-sanitizer is not installed")
    notes = []
    for step, (ns, net, fs) in enumerate(ISOLATION_LADDER):
        last = step == len(ISOLATION_LADDER) - 1
        if deadline_at is not None:
            wall_s = min(wall_s, deadline_at - time.monotonic())
            if wall_s < 1.0:
                notes.append("the evaluation's deadline passed")
                break
        layers = (("namespaces", ns), ("netns", net), ("landlock", fs))
        level = "+".join(n for n, on in layers if on) or "none"
        side = scratch.make("sanitize")  # 0700: the candidate cannot reach it
        log_path = os.path.join(side, f"{tool}.log")
        try:
            res = run_child(
                "judge_sanitize",
                job,
                workdir,
                limits=limits,
                wall_s=wall_s if last else min(wall_s, ATTACH_WALL_S),
                cuda=job.get("device", "cuda") == "cuda",
                isolate_net=net,
                isolate_fs=fs,
                isolate_ns=ns,
                writable=(*writable, side),  # the tool writes its log there
                readable=(*readable, os.path.dirname(tool_path)),
                env_extra={**env_extra, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
                wrapper=command(tool_path, tool, log_path),
            )
            log = Path(log_path)
            text = log.read_text(errors="replace") if log.exists() else ""
        finally:
            shutil.rmtree(side, ignore_errors=True)
        errors, first = parse_log(text)
        # A clean summary counts only if the candidate really ran its calls under the tool.
        finished = res.status is ChildStatus.OK and res.result.get("calls", 0) > 0
        if errors or (errors == 0 and finished):
            return SanitizerReport(
                tool,
                ran=True,
                errors=errors,
                first_errors=first,
                isolation=level,
                note=_ladder_note(notes, res),
                wall_s=res.wall_s,
                phase_s=res.result.get("phase_s", {}),
                log_tail=text[-2000:],
            )
        if errors == 0 or (res.status is ChildStatus.TIMEOUT and last):
            # The tool attached but the calls did not finish under it (they raised): a looser
            # sandbox would not change that. A timeout says nothing about memory safety either
            # (10-100x slower under the tool).
            return SanitizerReport(tool, ran=False, isolation=level, note=_ladder_note(notes, res))
        notes.append(f"{level} ({res.wall_s:.0f} s): {_child_note(res) or 'no summary in the log'}")
    return SanitizerReport(tool, ran=False, note="; ".join(notes)[-1500:])


def _ladder_note(notes: list[str], res: ChildResult) -> str:
    """The last try's note after those of the steps that did not attach (they cost wall time)."""
    return "; ".join([*notes, _child_note(res)]).strip("; ")[-1500:]


def _child_note(res: ChildResult) -> str:
    if res.status is ChildStatus.OK:
        err = res.result.get("error")
        return f"run() raised under the tool: {err[-500:]}" if err else ""
    return f"{res.status.value}: {res.error} {res.output[-500:]}".strip()
