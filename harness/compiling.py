"""Inside a child: compile a module's kernels without running them, and tell a compile failure
from a wrong result or a fault. Used by the candidate phases (untrusted sources, sandboxed)
and by the screen (renders of our own families); it never decides trust itself.
"""

from __future__ import annotations

import subprocess
import traceback
from collections.abc import Sequence

import torch

from kernels.problem import Op, Problem

_BUILD_FILES = ("torch/utils/cpp_extension.py", "harness/cuda_ext.py")
_BUILD_MARKERS = ("Error building extension", "CUDA_HOME", "nvcc", "ninja")


def is_cuda_fault(exc: BaseException) -> bool:
    """An error that leaves the CUDA context unusable (illegal address and the like)."""
    text = f"{type(exc).__name__} {exc}"
    return any(s in text for s in ("CUDA error", "AcceleratorError", "cudaError", "illegal memory"))


def is_compile_error(exc: BaseException) -> bool:
    """A Triton compile failure, or a CUDA C++ build that failed (or found no toolchain) when
    the module built lazily in prepare()/run() instead of at import: the source never became
    a kernel, so it is a compile error, not a wrong result."""
    mod = type(exc).__module__ or ""
    if "triton" in mod and "Compil" in type(exc).__name__:
        return True
    if isinstance(exc, subprocess.CalledProcessError):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    in_build = any(f.filename.replace("\\", "/").endswith(_BUILD_FILES) for f in frames)
    text = str(exc)
    return in_build and (
        isinstance(exc, (OSError, RuntimeError, ImportError))
        or any(m in text for m in _BUILD_MARKERS)
    )


def compile_only_launches() -> None:
    """Every `kernel[grid](...)` in this process compiles (or loads from the cache) and
    returns, launching nothing: Triton's own warmup path. Autotuned kernels compile every
    config this way. Nothing runs on a GPU that another process may be timing."""
    from triton.runtime.jit import JITFunction

    launch = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        return launch(self, *args, grid=grid, warmup=True, **kwargs)

    JITFunction.run = compile_only


def call_at_shapes(module, op: Op, problems: Sequence[Problem], device: str) -> None:
    """prepare() and run() once per shape on uninitialised tensors of the right shapes, dtypes
    and strides: compiling depends on those (and on the integer arguments), not on values.
    With compile_only_launches() in force this compiles every kernel those calls reach."""
    for problem in problems:
        inputs = [_empty_like(t, device) for t in _example_inputs(op, problem)]
        spec = op.output_spec(problem)
        out = torch.empty(spec.shape, dtype=spec.dtype, device=device)
        if callable(getattr(module, "prepare", None)):
            module.prepare(*inputs)
        module.run(*inputs, out=out)
    if device == "cuda":
        torch.cuda.synchronize()


def _example_inputs(op: Op, problem: Problem):
    try:  # shapes, dtypes and strides without materialising data
        return op.make_inputs(problem, seed=0, device="meta")
    except Exception:  # noqa: BLE001  (an op whose input maker needs real tensors)
        return op.make_inputs(problem, seed=0, device="cpu")


def _empty_like(t: torch.Tensor, device: str) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=device)
