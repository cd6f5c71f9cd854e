"""Typed results of the harness: what a candidate is, and what evaluating or profiling it found.

Everything here is plain data that serializes to JSON (to_dict / from_dict), because it
crosses process boundaries (sandbox -> harness -> agents -> Celery -> database -> browser).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Backend(enum.StrEnum):
    TRITON = "triton"
    CUDA = "cuda"  # C++ built with nvcc at import (CUDA, CUTLASS/CuTe): harness/cuda_ext.py

    @classmethod
    def of_family(cls, backend: str) -> Backend:
        """A kernels Family's backend name -> how the harness builds it: Triton, else nvcc."""
        return cls.TRITON if backend == "triton" else cls.CUDA


@dataclass(frozen=True)
class Candidate:
    source: str  # one self-contained module defining run(*inputs, out) (kernels/problem.py)
    backend: Backend = Backend.TRITON
    origin: str = ""  # who wrote it: "family:matmul_persistent_tma" or "llm:openai/gpt-x"
    # The family point this source claims to render (harness/judge/trust.py re-renders it:
    # only a byte-identical render of our own family is trusted and run in the judge's
    # process; anything else is recorded in its sandbox and replayed).
    family: str = field(default="", compare=False)
    params: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    @classmethod
    def of_render(cls, source: str, backend: Backend, family: str, params: Mapping[str, Any]):
        return cls(source, backend, f"family:{family}", family, tuple(sorted(dict(params).items())))

    @property
    def id(self) -> str:
        """Content hash: the same source and backend are the same candidate (compile cache key)."""
        return hashlib.sha256(f"{self.backend}\0{self.source}".encode()).hexdigest()[:16]


class Verdict(enum.StrEnum):
    PASSED = "passed"  # compiled, correct on every stage, no cheat found
    COMPILE_ERROR = "compile_error"  # did not import/compile, or lacks run()
    INCORRECT = "incorrect"  # a correctness stage failed
    CHEAT = "cheat"  # an anti-cheat check fired
    TIMEOUT = "timeout"  # killed by the parent at its wall-clock limit (hang)
    CRASH = "crash"  # the sandbox died (segfault, illegal address, OOM)
    INFRA_ERROR = "infra_error"  # the harness itself failed; not the candidate's fault


class Regime(enum.StrEnum):
    OFFLINE = "offline"  # back-to-back calls, warm clocks (CUDA-L2 "offline")
    SERVER = "server"  # idle gaps between calls, cold L2 (CUDA-L2 "server")
    INTERPRETER = "interpreter"  # Triton CPU interpreter: never compared with GPU numbers


class Bottleneck(enum.StrEnum):
    COMPUTE = "compute"
    MEMORY = "memory"
    LATENCY = "latency"
    OCCUPANCY = "occupancy"
    UNKNOWN = "unknown"


@dataclass
class CompileResult:
    ok: bool
    log: str = ""  # compiler / import output, size-capped
    seconds: float = 0.0
    cached: bool = False  # reused from the compile cache (source hash + flags)
    registers: int | None = None  # per thread, from the compiler's resource report
    spills: int | None = None  # spill stores + loads, bytes
    shared_mem_bytes: int | None = None


@dataclass
class StageResult:
    name: str  # "smoke", "shape_sweep", "dtypes", "adversarial", "determinism", ...
    passed: bool
    worst_error: float | None = None  # max |out-ref| / (atol + rtol*|ref|); <= 1 passes
    cases: int = 0  # how many input cases this stage ran
    detail: str = ""  # first failure, human readable


@dataclass
class Finding:
    check: str  # "side_stream", "thread", "lazy_output", "timer_patch", "cached_result", ...
    severity: str  # "reject" or "warn"
    detail: str


@dataclass
class TimingStats:
    median_us: float
    iqr_us: float  # interquartile range
    mean_us: float
    min_us: float
    samples: int
    rel_stderr: float  # stopping rule statistic: stderr / mean (harness: of the median, from IQR)


@dataclass
class Timings:
    regime: Regime
    protocol: str  # versioned name of the timing protocol, e.g. "kf-timing-v1"
    candidate: TimingStats
    baselines: dict[str, TimingStats] = field(
        default_factory=dict
    )  # "torch", "compile", "cublaslt"
    speedups: dict[str, float] = field(default_factory=dict)  # baseline median / candidate median
    speedup_ci: dict[str, tuple[float, float]] = field(default_factory=dict)  # bootstrap 95 %
    noise: float = 0.0  # relative spread when timing the same thing twice (judge's threshold)


@dataclass
class DeviceInfo:
    name: str  # "NVIDIA H200" or "cpu (triton interpreter)"
    kind: str  # "cuda" or "interpreter"
    torch: str = ""
    triton: str = ""
    driver: str = ""
    cuda: str = ""
    peak_tflops: float | None = None  # measured dense bf16 matmul rate
    # The fastest measured memory stream: a read (a decode GEMM's weights), or a copy where
    # reads were not measured (ceilings cached before 2026-11-29).
    peak_gbps: float | None = None
    # Added by the harness engineer: per-dtype measured matmul rates (fp32 is TF32-off), how
    # the ceilings were measured, and whether they came from the per-device cache.
    peak_tflops_by_dtype: dict[str, float] = field(default_factory=dict)
    method: str = ""
    cached: bool = False
    copy_gbps: float | None = None  # device-to-device copy_, read + write bytes
    read_gbps: float | None = None  # a read-only stream

    def floor_s(self, flops: float, nbytes: float, dtype: str) -> float:
        """The roofline's least time for this much work at the measured ceilings (0.0 where
        none were measured: the interpreter)."""
        if not self.peak_gbps:
            return 0.0
        peak = self.peak_tflops_by_dtype.get(dtype) or self.peak_tflops or 0.0
        return max(flops / (peak * 1e12) if peak else 0.0, nbytes / (self.peak_gbps * 1e9))


@dataclass
class Evaluation:
    candidate_id: str
    problem_key: str
    verdict: Verdict
    compile: CompileResult
    stages: list[StageResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    timings: Timings | None = None
    tflops: float | None = None
    gbps: float | None = None
    pct_of_roof: float | None = None  # candidate vs the binding measured ceiling, 0..100+
    implausible: bool = False  # faster than the measured roof allows: flagged, never ranked
    device: DeviceInfo | None = None
    duration_s: float = 0.0
    stdout_tail: str = ""  # the sandbox's captured output, size-capped
    error: str = ""  # why it failed, one paragraph for humans
    # Added by the harness engineer: GPU kernels / aten ops seen in one audited call (every
    # recorded candidate; our own renders only where the problem forbids the vendor library), the
    # isolation that was actually applied (it depends on the host), and timing cross-checks.
    kernels: list[str] = field(default_factory=list)
    isolation: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.PASSED and not self.implausible

    def speedup(self, baseline: str = "torch") -> float | None:
        if self.timings is None:
            return None
        return self.timings.speedups.get(baseline)

    def to_dict(self) -> dict[str, Any]:
        return _to_jsonable(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        return _from_jsonable(cls, data)


@dataclass
class Profile:
    candidate_id: str
    problem_key: str
    metrics: dict[str, float | None]  # stable short names -> value (harness/ncu.py's table)
    bottleneck: Bottleneck
    stalls: list[tuple[str, float]] = field(default_factory=list)  # top reasons, cycles/issue
    rules: list[dict[str, Any]] = field(default_factory=list)  # ncu rule messages + est. speedup
    kernels: list[str] = field(default_factory=list)  # kernel names inside the NVTX range
    report_path: str | None = None  # the raw .ncu-rep, kept as an artifact
    clock_control: str = "none"
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return _to_jsonable(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        return _from_jsonable(cls, data)


def _to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_to_jsonable(v) for v in obj]
    return obj


def _from_jsonable(cls: Any, data: Any) -> Any:
    """Rebuild nested dataclasses and enums from _to_jsonable's output, using type hints."""
    import typing

    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _coerce(hints[f.name], data[f.name])
    return cls(**kwargs)


def _coerce(tp: Any, value: Any) -> Any:
    import types
    import typing

    if value is None:
        return None
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _coerce(inner[0], value) if len(inner) == 1 else value
    if dataclasses.is_dataclass(tp):
        return _from_jsonable(tp, value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if origin is list:
        return [_coerce(args[0], v) for v in value] if args else list(value)
    if origin is tuple:
        return tuple(value)
    if origin is dict:
        return {k: _coerce(args[1], v) for k, v in value.items()} if args else dict(value)
    return value
