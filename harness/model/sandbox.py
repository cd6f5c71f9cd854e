"""Run one model_* phase (model_child.py) on an uploaded model in the harness's sandbox, and
turn whatever happened into a typed outcome with a message a user can act on.

The model file is untrusted code: it runs only in a fresh sandboxed child (sandbox.run_child:
allow-listed environment, cgroup memory cap, no network, nothing writable outside its scratch
folder, SIGKILL at the wall-clock limit), never in the calling process (a Celery worker).
"""

from __future__ import annotations

import dataclasses
import enum
import signal
from dataclasses import dataclass, field
from pathlib import Path

from harness.config import Limits
from harness.sandbox import ChildStatus, run_child

# pids: Inductor's compile workers and their threads count against the cgroup's pids.max.
MODEL_LIMITS = Limits(
    wall_s=300.0, memory_bytes=16 * 2**30, max_file_bytes=2 * 2**30, max_pids=2048
)
# The end-to-end check compiles the model four ways (max-autotune among them) before timing.
MODEL_VERIFY_LIMITS = dataclasses.replace(MODEL_LIMITS, wall_s=900.0)


class ModelFailure(enum.StrEnum):
    CONVENTION = "convention"  # the file lacks Model / get_inputs / get_init_inputs
    IMPORT = "import"  # importing the file raised
    INIT = "init"  # get_init_inputs() or Model(...) raised
    INPUTS = "inputs"  # get_inputs() raised
    FORWARD = "forward"  # the forward pass raised
    KERNEL = "kernel"  # a substituted kernel failed to load or run
    TIMEOUT = "timeout"  # killed at the wall-clock limit
    MEMORY = "memory"  # over the memory cap
    CRASH = "crash"  # the process died
    SANDBOX = "sandbox"  # our side failed


_STAGES = {
    "import": (ModelFailure.IMPORT, "Importing the model file raised an error"),
    "get_init_inputs": (ModelFailure.INIT, "get_init_inputs() raised an error"),
    "init": (ModelFailure.INIT, "Building Model(*get_init_inputs()) raised an error"),
    "get_inputs": (ModelFailure.INPUTS, "get_inputs() raised an error"),
    "forward": (ModelFailure.FORWARD, "The model's forward pass raised an error"),
    "load_kernel": (ModelFailure.KERNEL, "A winning kernel could not be loaded"),
    "forward_substituted": (ModelFailure.KERNEL, "The model with kernels substituted raised"),
}


@dataclass
class PhaseOutcome:
    ok: bool
    result: dict = field(default_factory=dict)
    failure: ModelFailure | None = None
    message: str = ""  # for the user: what went wrong and what to change
    isolation: dict = field(default_factory=dict)
    wall_s: float = 0.0


def default_device() -> str:
    from harness.device import gpu_visible

    return "cuda" if gpu_visible() else "cpu"


def child_env(device: str) -> dict[str, str]:
    """Without a GPU, Triton kernels (winners, screened points) run in its interpreter."""
    return {} if device == "cuda" else {"TRITON_INTERPRET": "1"}


def run_model_phase(
    phase: str,
    source: str,
    job: dict,
    *,
    device: str,
    limits: Limits = MODEL_LIMITS,
    trace_to: str | None = None,
) -> PhaseOutcome:
    """Run `phase` on the uploaded model in the sandbox.

    trace_to: where to write the Chrome trace the child sends back (model_profile).
    The child runs as an untrusted phase (harness.phases.is_untrusted): an unprivileged uid, a
    view without our files, its scratch a private tmpfs; the model travels in the job.
    """
    job = {
        **job,
        "model_source": source,
        "device": device,
        "gpu_memory_bytes": limits.memory_bytes,
    }
    child = run_child(
        phase, job, "", limits=limits, cuda=device == "cuda", env_extra=child_env(device)
    )
    trace = child.result.pop("trace", None) if isinstance(child.result, dict) else None
    if trace_to and isinstance(trace, str):
        Path(trace_to).write_text(trace)
    return outcome_of(child, limits)


def outcome_of(child, limits: Limits) -> PhaseOutcome:
    base = {"isolation": child.isolation.to_dict(), "wall_s": child.wall_s}
    tail = child.output[-1500:].strip()
    if child.status is ChildStatus.TIMEOUT:
        return PhaseOutcome(
            False,
            failure=ModelFailure.TIMEOUT,
            message=f"The model ran longer than the limit of {limits.wall_s:.0f} s and was "
            "stopped. Make it smaller (fewer layers, shorter inputs) or check for an endless loop.",
            **base,
        )
    if child.status is ChildStatus.CRASH:
        killed = child.returncode == -signal.SIGKILL
        if killed or "MemoryError" in tail or "out of memory" in tail.lower():
            gib = limits.memory_bytes / 2**30
            return PhaseOutcome(
                False,
                failure=ModelFailure.MEMORY,
                message=f"The model used more memory than its cap of {gib:.0f} GiB and was "
                "stopped. Use smaller weights or inputs.",
                **base,
            )
        return PhaseOutcome(
            False,
            failure=ModelFailure.CRASH,
            message=f"The model's process died ({child.error}). Last output:\n{tail}",
            **base,
        )
    if child.status is not ChildStatus.OK:
        return PhaseOutcome(
            False,
            failure=ModelFailure.SANDBOX,
            message=f"The sandbox failed ({child.status.value}): {child.error[-1500:]}",
            **base,
        )
    result = child.result
    if not result.get("ok"):
        failure, what = _STAGES.get(
            result.get("stage", ""), (ModelFailure.CRASH, "The model failed")
        )
        error = result.get("error", "")
        if "out of memory" in error.lower() or "MemoryError" in error:
            failure, what = ModelFailure.MEMORY, f"{what}: out of memory (the job's cap)"
        if result.get("stage") == "import" and "does not define" in error:
            failure = ModelFailure.CONVENTION
            what = "The file does not follow the KernelBench convention"
        return PhaseOutcome(False, result, failure, f"{what}:\n{_last_lines(error)}", **base)
    return PhaseOutcome(True, result, **base)


def _last_lines(text: str, n: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-n:])
