"""verify_model(source, winners) -> EndToEnd: the model with the winning kernels substituted
(module patching, model_patch.py), checked against the unmodified model on the same inputs
and timed against it, interleaved in one sandboxed process with the harness's protocol.

On a GPU the pair is timed three ways, since "end to end" depends on who launches the work:
eager under the OFFLINE protocol (its GPU pre-roll hides up to 2 ms of host launch work),
eager launch-bound (idle GPU before each call: Python and launch costs count), and CUDA-graph
replay (no host work: the kernels' own end-to-end effect, what Amdahl over kernel time
predicts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.config import Limits
from harness.model.sandbox import MODEL_LIMITS, ModelFailure, default_device, run_model_phase


@dataclass(frozen=True)
class Winner:
    problem_key: str  # kernels.Problem.key the kernel was verified on
    source: str  # the candidate module: run(*inputs, out)


@dataclass
class EndToEnd:
    ok: bool  # the check ran and every output is within tolerance
    device: str = ""
    device_name: str = ""
    original_us: float | None = None  # median forward time, unmodified model
    substituted_us: float | None = None  # median forward time, kernels substituted
    speedup: float | None = None  # original / substituted (ratio of medians)
    speedup_ci: tuple[float, float] | None = None  # bootstrap 95 % interval
    hits: dict[str, int] = field(default_factory=dict)  # problem key -> kernel calls per forward
    unused: list[str] = field(default_factory=list)  # winners no module call matched
    compare: dict = field(default_factory=dict)  # per output: rel_l2, max_abs, tolerance
    timing: dict = field(default_factory=dict)  # TimingStats of both, as dicts
    regime: str = ""
    # The same pair timed two more ways on a GPU (empty elsewhere), see model_child.verify:
    # launch_bound: eager with an idle GPU before each call (host launch cost included);
    # graphed: both forwards replayed as CUDA graphs (kernel time only), with its own output
    # check, or {"ok": False, "error": ...} where the model could not be captured.
    launch_bound: dict = field(default_factory=dict)
    graphed: dict = field(default_factory=dict)
    failure: ModelFailure | None = None
    message: str = ""

    @property
    def outputs_match(self) -> bool:
        return bool(self.compare.get("passed"))

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "device": self.device,
            "device_name": self.device_name,
            "original_us": self.original_us,
            "substituted_us": self.substituted_us,
            "speedup": self.speedup,
            "speedup_ci": list(self.speedup_ci) if self.speedup_ci else None,
            "hits": self.hits,
            "unused": self.unused,
            "compare": self.compare,
            "timing": self.timing,
            "regime": self.regime,
            "launch_bound": self.launch_bound,
            "graphed": self.graphed,
            "failure": self.failure.value if self.failure else None,
            "message": self.message,
        }


def verify_model(
    source: str,
    winners: list[Winner],
    *,
    device: str | None = None,
    limits: Limits = MODEL_LIMITS,
    seed: int = 0,
    max_samples: int = 50,
) -> EndToEnd:
    device = device or default_device()
    job = {
        "seed": seed,
        "substitutions": [{"key": w.problem_key, "source": w.source} for w in winners],
        "max_samples": max_samples,
        "min_samples": min(10, max_samples),
    }
    outcome = run_model_phase("model_verify", source, job, device=device, limits=limits)
    if not outcome.ok:
        return EndToEnd(False, device=device, failure=outcome.failure, message=outcome.message)
    r = outcome.result
    t = r["timing"]
    orig, sub = t["original"]["median_us"], t["substituted"]["median_us"]
    passed = bool(r["compare"].get("passed"))
    return EndToEnd(
        ok=passed,
        device=r["device"],
        device_name=r["device_name"],
        original_us=orig,
        substituted_us=sub,
        speedup=orig / sub if sub > 0 else None,
        speedup_ci=tuple(r["speedup_ci"]),
        hits=r["hits"],
        unused=r["unused"],
        compare=r["compare"],
        timing=t,
        regime=r["regime"],
        launch_bound=r.get("launch_bound", {}),
        graphed=r.get("graphed", {}),
        failure=None if passed else ModelFailure.KERNEL,
        message=""
        if passed
        else "The model's outputs with the kernels substituted are not "
        "within tolerance of the unmodified model's.",
    )
