"""How one evaluation runs: regime, limits, how much checking and timing, which baselines."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.results import Regime

# v2 (2026-11-29): the L2 flush reads its buffer instead of writing it (harness.timing.L2Flush).
TIMING_PROTOCOL = "kf-timing-v2"


@dataclass(frozen=True)
class Limits:
    """Per-phase sandbox limits. Wall clock is enforced by the parent with SIGKILL (R3.2)."""

    wall_s: float = 300.0
    cpu_s: int = 600  # RLIMIT_CPU; generous because torch/triton start-up burns CPU
    memory_bytes: int = 16 * 2**30  # cgroup memory limit (never RLIMIT_AS with CUDA)
    max_pids: int = 512  # cgroup pids.max (threads count too: torch and CUDA start many)
    max_file_bytes: int = 8 * 2**30  # RLIMIT_FSIZE: outputs and inputs travel as files
    max_open_files: int = 1024  # RLIMIT_NOFILE
    output_cap_bytes: int = 16 * 1024  # stdout+stderr kept: head and tail of this size
    # The child's private /tmp (its HOME, caches, scratch): a tmpfs of this size in its own
    # view; writing past it fails with ENOSPC (and its pages count against memory_bytes).
    scratch_bytes: int = 4 * 2**30


@dataclass(frozen=True)
class EvalConfig:
    """Knobs of one evaluate() call. The defaults are the full, publishable protocol."""

    regime: Regime | None = None  # None: OFFLINE on a GPU, INTERPRETER without one
    quick: bool = False  # agent inner loop: fewer sweep shapes and timing samples
    baselines: tuple[str, ...] | None = None  # None: ("torch",) quick, all that apply otherwise
    forbid_vendor_library: bool = False  # the problem forbids calling cuBLAS/aten for the op
    time_candidate: bool = True  # False: correctness only
    limits: Limits = field(default_factory=Limits)
    # The whole evaluate() call returns within this many seconds: every phase's wall-clock
    # limit is cut to what is left (a caller's budget is a cap, not a per-phase allowance).
    deadline_s: float | None = None
    deadline_at: float | None = None  # set by evaluate() from deadline_s (time.monotonic())
    compile_wall_s: float = 300.0  # first import of a CUDA C++ candidate may build for minutes
    device: str | None = None  # "cpu" forces the interpreter even where a GPU exists
    dtypes: tuple[str, ...] = ()  # extra dtypes the candidate must also handle (dtypes stage)
    min_samples: int | None = None
    max_samples: int | None = None
    target_rel_err: float | None = None  # stopping rule: stderr/mean of every timed function
    server_gap_ms: float = 2.0  # mean idle gap (exponential) before each call in SERVER regime
    baseline_error_factor: float = 4.0  # candidate error may be at most this x the vendor's
    op_ref: str = ""  # "module:ATTR" naming an Op, for ops that are not in kernels/ (tests)
    network_isolation: bool = True
    fs_isolation: bool = True
    keep_dir: bool = False  # keep the sandbox folders (debugging)
    # compute-sanitizer on the smoke case after the value checks pass (GPU only; slow: for
    # re-verifying a final best, not the inner loop). Any reported error -> INCORRECT.
    sanitize: bool = False
    sanitize_tools: tuple[str, ...] = ("memcheck",)  # add "racecheck" for shared-memory races

    def samples(self) -> tuple[int, int, float]:
        """(min, max, target relative standard error) of the timing stopping rule."""
        if self.regime is Regime.INTERPRETER:
            lo, hi, rel = 3, 7, 0.05
        elif self.quick:
            lo, hi, rel = 20, 100, 0.02
        else:
            lo, hi, rel = 100, 1000, 0.01
        return (
            self.min_samples or lo,
            self.max_samples or hi,
            self.target_rel_err if self.target_rel_err is not None else rel,
        )
