"""The baselines a candidate is timed against, built by trusted code before the candidate loads.

torch    : the op's eager PyTorch baseline (cuBLAS for GEMM), destination passing
compile  : torch.compile(mode="max-autotune-no-cudagraphs") of the same eager code (returns a new tensor)
cublaslt : GEMM only; cuBLASLt's heuristic top algorithms timed, fastest kept (CUDA-L2's
           strongest baseline), from a prebuilt extension (harness/cublaslt.py)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from kernels.problem import Op, Problem

ALL = ("torch", "compile", "cublaslt")


@dataclass
class Built:
    built: dict[str, Callable[..., None]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # each one's build, for phase_s
    # Where the compile baseline's build went (phase_s too): a full verification on an H200
    # spent 8 s building it on a hit in Inductor's graph cache, against 0.9 s for the same
    # first call in a bare process (2026-11-29, results/both_ways_h200_3shapes_c.json).
    parts: dict[str, float] = field(default_factory=dict)


def applicable(op_name: str, layout: str, device: str) -> tuple[str, ...]:
    if device != "cuda":
        return ("torch",)
    names = ["torch", "compile"]
    if op_name == "matmul" and layout in ("", "NN"):
        names.append("cublaslt")
    return tuple(names)


def make(names, op: Op, problem: Problem, device: str, cublaslt_dir: str | None) -> Built:
    result = Built()
    spec = op.output_spec(problem)
    for name in names:
        started = time.perf_counter()
        try:
            if name == "torch":
                result.built[name] = _torch(op, problem)
            elif name == "compile":
                result.built[name] = _compiled(op, problem, spec, device, result.parts)
            elif name == "cublaslt":
                from harness.judge import cublaslt

                ext = cublaslt.load(cublaslt_dir)
                result.built[name] = _cublaslt(ext, op, problem, spec, device)
        except Exception as exc:  # noqa: BLE001  (a baseline that cannot build is reported)
            result.errors[name] = f"{type(exc).__name__}: {exc}"[:500]
        result.seconds[name] = round(time.perf_counter() - started, 3)
    return result


def _torch(op: Op, problem: Problem) -> Callable[..., None]:
    def call(*inputs: torch.Tensor, out: torch.Tensor) -> None:
        op.baseline(problem, *inputs, out=out)

    return call


def _compiled(
    op: Op, problem: Problem, spec, device: str, parts: dict[str, float]
) -> Callable[..., None]:
    started = time.perf_counter()
    import torch._dynamo  # noqa: F401  (a warm spare imported it ahead; a fresh child pays here)
    import torch._inductor.config as inductor_config

    parts["compile_imports"] = round(time.perf_counter() - started, 3)
    started = time.perf_counter()

    # In-process compilation: inductor's subprocess workers failed inside the sandbox on the
    # H100 (SubprocException in the compile pool); one thread is slower but works there.
    inductor_config.compile_threads = 1

    def eager(*inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        out = torch.empty(spec.shape, dtype=spec.dtype, device=device)
        return op.baseline_result(problem, *inputs, out=out)  # unpacked: no copy compiled

    # No CUDA graphs: Inductor's cudagraph trees copy every fresh input tensor into their
    # static buffers, and the timing loop hands it fresh tensors each round, so "max-autotune"
    # timed rmsnorm 8192x8192 bf16 at 176 us against 67 us without graphs (H200, 2026-11-22)
    # and inflated every speedup over it. Launch cost is the regimes' business, not the baseline's.
    compiled = torch.compile(
        eager, mode="max-autotune-no-cudagraphs", dynamic=False, fullgraph=False
    )
    example = op.make_inputs(problem, seed=1, device=device)
    parts["compile_setup"] = round(time.perf_counter() - started, 3)
    started = time.perf_counter()
    with op.numerics(problem):
        compiled(*example)  # compile + autotune now, not inside the warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    parts["compile_first_call"] = round(time.perf_counter() - started, 3)
    parts.update(_dynamo_times())

    def call(*inputs: torch.Tensor, out: torch.Tensor) -> None:
        with op.numerics(problem):
            compiled(*inputs)

    return call


def _dynamo_times(least_s: float = 0.05) -> dict[str, float]:
    """Dynamo's own timers over this process's compiles (its one baseline), the slow ones."""
    from torch._dynamo.utils import compile_times

    try:
        names, values = compile_times(repr="csv", aggregate=True)  # type: ignore[misc]
        times = {
            f"compile_part:{n}": round(float(str(v)), 3) for n, v in zip(names, values, strict=True)
        }
    except (TypeError, ValueError):  # another torch's format: the totals above still hold
        return {}
    return {k: v for k, v in times.items() if v >= least_s}


def _cublaslt(ext, op: Op, problem: Problem, spec, device: str) -> Callable[..., None]:
    example = op.make_inputs(problem, seed=2, device=device)
    out = torch.empty(spec.shape, dtype=spec.dtype, device=device)
    ext.tune(example[0], example[1], out, 16)  # times the heuristic's top 16, keeps the fastest
    torch.cuda.synchronize()

    def call(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        ext.matmul(a, b, out)

    return call
