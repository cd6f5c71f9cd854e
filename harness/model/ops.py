"""Winning kernels as torch.library custom ops, so a model with them substituted still compiles.

Each kernel (a candidate module: `run(*inputs, out)`, optional `prepare(*inputs)`) becomes
`torch.ops.kf_model.<name>(inputs: Tensor[]) -> Tensor`, with a fake implementation that only
gives the output's shape and dtype. torch.compile then sees an opaque op of known shape:
Inductor fuses the ops around it and calls it, instead of tracing into Triton launches it
cannot see through. The real implementation counts its calls (`hits`), in eager and compiled
runs alike (not in CUDA-graph replays, which launch no Python).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from types import ModuleType

import torch

import kernels
from kernels.problem import Problem

NAMESPACE = "kf_model"
hits: Counter[str] = Counter()  # problem key -> kernel calls
_registered: dict[str, Callable] = {}  # problem key -> torch.ops.kf_model.<name>


def op_name(key: str) -> str:
    """A valid op name for a problem key: swiglu_gate/8x11008x4096/bf16 -> swiglu_gate_8x11008x4096_bf16."""
    return re.sub(r"[^A-Za-z0-9_]+", "_", key).strip("_")


def kernel_op(problem: Problem, module: ModuleType) -> Callable:
    """torch.ops.kf_model.<name> running `module` for `problem` (registered once per process)."""
    key = problem.key
    if key in _registered:
        return _registered[key]
    spec = kernels.get_op(problem.op).output_spec(problem)
    shape, dtype = tuple(spec.shape), spec.dtype
    state = {"prepared": False}

    def impl(inputs: list[torch.Tensor]) -> torch.Tensor:
        out = torch.empty(shape, dtype=dtype, device=inputs[0].device)
        if not state["prepared"] and callable(getattr(module, "prepare", None)):
            module.prepare(*inputs)  # one-time work (descriptors, a transposed weight)
        state["prepared"] = True
        module.run(*inputs, out=out)
        hits[key] += 1
        return out

    op = torch.library.custom_op(f"{NAMESPACE}::{op_name(key)}", impl, mutates_args=())

    @op.register_fake
    def _fake(inputs: list[torch.Tensor]) -> torch.Tensor:
        return inputs[0].new_empty(shape, dtype=dtype)

    _registered[key] = op
    return op


def baseline_op(problem: Problem) -> Callable:
    """The op's own PyTorch baseline for `problem`, for a site where it does less than the
    model's code (sites.Site.baseline_saves): a plain function, which Inductor traces into
    the graph like the model's own PyTorch, not an opaque op. It counts its calls as a kernel's
    op does (under Inductor, when its tracing calls it: not per run)."""
    op = kernels.get_op(problem.op)
    spec = op.output_spec(problem)
    key = problem.key

    def baseline(inputs: list[torch.Tensor]) -> torch.Tensor | tuple[torch.Tensor, ...]:
        hits[key] += 1
        out = inputs[0].new_empty(tuple(spec.shape), dtype=spec.dtype)
        return op.baseline_result(problem, *inputs, out=out)

    return baseline
