"""profile_model(source) -> ModelProfile: what a model spends its GPU (or CPU) time on.

Builds the uploaded model in the sandbox, runs a few warm-up forward calls, then profiles
several steps with torch.profiler and classifies every kernel into the ops of kernels/
(model_classify.py). On a machine without a GPU the profile is of CPU ops (aten op names) and
says so: `device == "cpu"`; its times never compare with a GPU profile's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from harness.config import Limits
from harness.device import device_ceilings
from harness.model.classify import ProblemGroup, group_records, plan_groups
from harness.model.sandbox import (
    MODEL_LIMITS,
    ModelFailure,
    default_device,
    run_model_phase,
)
from harness.model.trace import record_from_dict
from harness.results import DeviceInfo


@dataclass
class CompiledProfile:
    """torch.compile(model) (default mode): its compile time and the kernels it runs."""

    ok: bool
    compile_s: float | None = None
    forward_wall_us: float | None = None
    total_us: float = 0.0  # kernel time per step
    groups: list[ProblemGroup] = field(default_factory=list)
    error: str = ""

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "compile_s": self.compile_s,
            "forward_wall_us": self.forward_wall_us,
            "total_us": self.total_us,
            "groups": [g.to_dict() for g in self.groups],
            "error": self.error,
        }


def _compiled(r: dict | None) -> CompiledProfile | None:
    if r is None:
        return None
    if not r.get("ok"):
        return CompiledProfile(False, error=r.get("error", "")[-3000:])
    records = [record_from_dict(d) for d in r["records"]]
    groups = group_records(records, {}, r["steps"])
    return CompiledProfile(
        True,
        compile_s=r["compile_s"],
        forward_wall_us=r["forward_wall_us"],
        total_us=sum(g.time_us for g in groups),
        groups=groups,
    )


@dataclass
class ModelProfile:
    ok: bool
    device: str = ""  # "cuda" or "cpu" (a CPU profile: aten ops, not kernels)
    device_name: str = ""
    torch_version: str = ""
    steps: int = 0  # profiled forward calls; group times are per step
    step_wall_us: list[float] = field(default_factory=list)  # host time of each profiled step
    forward_wall_us: float | None = None  # median wall time of a plain (unprofiled) forward
    total_us: float = 0.0  # sum of kernel (CPU: op self) time per step
    groups: list[ProblemGroup] = field(default_factory=list)  # largest first
    failure: ModelFailure | None = None
    message: str = ""
    isolation: dict = field(default_factory=dict)
    modules: dict = field(default_factory=dict)  # module path -> call info (model_child)
    sites: list[dict] = field(default_factory=list)  # sites.Site.to_dict(): where ops can go
    compiled: CompiledProfile | None = None  # the same model under torch.compile (GPU)
    roof: DeviceInfo | None = None  # the GPU's measured ceilings, for the plan's headroom

    @property
    def basis(self) -> str:
        """What the plan is made from: the compiled model's kernels when it compiled (what a
        team that compiles would still spend time on), else the eager model's."""
        return "torch.compile" if self.compiled and self.compiled.ok else "eager"

    def plan_groups(self) -> list[dict]:
        """Groups for the Amdahl plan: the basis's groups, Linear time moved to fusions."""
        compiled = self.compiled if self.basis == "torch.compile" else None
        groups = compiled.groups if compiled else self.groups
        return plan_groups([g.to_dict() for g in groups], self.sites, self.roof)

    @property
    def gpu_busy(self) -> float | None:
        """Kernel time / plain forward wall time. Well below 1, the model is host-bound (Python,
        launches): Amdahl over kernel time then overstates what faster kernels give."""
        if not self.forward_wall_us or self.device != "cuda":
            return None
        return self.total_us / self.forward_wall_us

    @property
    def label(self) -> str:
        return "GPU kernels" if self.device == "cuda" else "CPU profile (aten ops; not GPU time)"

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "device": self.device,
            "device_name": self.device_name,
            "torch": self.torch_version,
            "label": self.label,
            "steps": self.steps,
            "step_wall_us": self.step_wall_us,
            "forward_wall_us": self.forward_wall_us,
            "gpu_busy": self.gpu_busy,
            "total_us": self.total_us,
            "groups": [g.to_dict() for g in self.groups],
            "failure": self.failure.value if self.failure else None,
            "message": self.message,
            "isolation": self.isolation,
            "modules": self.modules,
            "sites": self.sites,
            "compiled": self.compiled.to_dict() if self.compiled else None,
            "basis": self.basis,
            "roof": dataclasses.asdict(self.roof) if self.roof else None,
        }


def profile_model(
    source: str,
    *,
    device: str | None = None,
    limits: Limits = MODEL_LIMITS,
    steps: int = 3,
    warmup: int = 3,
    seed: int = 0,
    trace_to: str | None = None,
    compiled: bool | None = None,
    compile_threads: int = 1,
) -> ModelProfile:
    """Profile `source` (a KernelBench-convention file) in the sandbox; never raises for the
    model's own failures: they come back as `failure` + `message`. compiled: also compile and
    profile it (default: on a GPU only; a CPU compile takes minutes)."""
    device = device or default_device()
    job = {"steps": steps, "warmup": warmup, "seed": seed, "keep_trace": bool(trace_to)}
    if compiled is not None:
        job["compiled"] = compiled
    job["compile_threads"] = compile_threads
    outcome = run_model_phase(
        "model_profile",
        source,
        job,
        device=device,
        limits=limits,
        trace_to=trace_to,
    )
    if not outcome.ok:
        return ModelProfile(
            False,
            device=device,
            failure=outcome.failure,
            message=outcome.message,
            isolation=outcome.isolation,
        )
    r = outcome.result
    records = [record_from_dict(d) for d in r["records"]]
    groups = group_records(records, r["modules"], r["steps"])
    if not groups:
        return ModelProfile(
            False,
            device=device,
            failure=ModelFailure.FORWARD,
            message="The profiler recorded no work: the forward pass ran nothing measurable.",
            isolation=outcome.isolation,
        )
    return ModelProfile(
        True,
        device=r["device"],
        device_name=r["device_name"],
        torch_version=r["torch"],
        steps=r["steps"],
        step_wall_us=r["step_wall_us"],
        forward_wall_us=r.get("forward_wall_us"),
        total_us=sum(g.time_us for g in groups),
        groups=groups,
        isolation=outcome.isolation,
        modules=r["modules"],
        sites=r.get("sites", []),
        compiled=_compiled(r.get("compiled")),
        roof=_roof(r["device"]),
    )


def _roof(device: str) -> DeviceInfo | None:
    """The GPU's ceilings (measured once per device, cached): without them the plan expects
    the same of every problem, at the roof or not."""
    if device != "cuda":
        return None
    try:
        return device_ceilings()
    except RuntimeError:
        return None
