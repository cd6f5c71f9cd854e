"""Execute a Plan (harness/plan.py) on buffers the caller allocated: our host code, not the
candidate's.

The judge binds each plan to its own inputs and its own poisoned, guard-banded output and
runs the steps in order: Triton and CUDA launches through a Launcher (compiled cubins on a
GPU: harness/judge/binaries.py; the candidate's interpreted functions on the CPU, inside the
candidate's sandbox: harness/child/serve.py), the allowed tensor operations through
torch.ops.aten. Before anything runs, every pointer an argument names must start inside its
buffer (the output's guard bands included), every view must fit its buffer, and every
pointer the kernel was compiled as 16-byte aligned must still be.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from harness import plan as P


class Launcher:
    """How a plan's kernels run here; the judge's and the CPU executor's differ."""

    def triton(self, plan: P.Plan, step: P.Launch, args: tuple, kwargs: dict) -> None:
        raise NotImplementedError

    def cuda(self, plan: P.Plan, step: P.CudaLaunch, args: tuple) -> None:
        raise NotImplementedError

    def pointers(self) -> bool:
        """Whether pointer arguments travel as integers (compiled) or as tensors (interpreter)."""
        return True

    def blob(self, sha: str) -> bytes:
        raise NotImplementedError


@dataclass
class _Buffer:
    tensor: torch.Tensor  # whose storage holds it
    base: int  # data pointer that view offsets count from
    lo: int  # allowed byte range around base
    hi: int


class Bound:
    """One plan bound to one set of inputs and one output; `prepare()` once, then `call()`."""

    def __init__(
        self,
        plan: P.Plan,
        launcher: Launcher,
        inputs: Sequence[torch.Tensor],
        out: torch.Tensor,
        *,
        guard_bytes: int,
        workspaces: list[torch.Tensor] | None = None,
    ) -> None:
        self.plan = plan
        self.launcher = launcher
        self.device = out.device
        _check_spec(plan.output, out, "output")
        if len(inputs) != len(plan.inputs):
            raise P.PlanError(f"plan takes {len(plan.inputs)} inputs, the call has {len(inputs)}")
        for i, (spec, t) in enumerate(zip(plan.inputs, inputs, strict=True)):
            _check_spec(spec, t, f"input {i}")
        self.buffers: dict[P.Ref, _Buffer] = {}
        for i, t in enumerate(inputs):
            self.buffers[P.Ref(P.BufferKind.INPUT, i)] = _Buffer(t, t.data_ptr(), 0, _nbytes(t))
        self.buffers[P.Ref(P.BufferKind.OUTPUT)] = _Buffer(
            out, out.data_ptr(), -guard_bytes, _nbytes(out) + guard_bytes
        )
        self.workspaces = workspaces if workspaces is not None else allocate(plan, self.device)
        for j, w in enumerate(self.workspaces):
            self.buffers[P.Ref(P.BufferKind.WORKSPACE, j)] = _Buffer(w, w.data_ptr(), 0, _nbytes(w))
        for j, preset in enumerate(plan.presets):
            data = launcher.blob(preset.binary)
            t = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(self.device)
            self.buffers[P.Ref(P.BufferKind.PRESET, j)] = _Buffer(t, t.data_ptr(), 0, len(data))
        # Steps that name no temp are bound once; the others each call, after their temps.
        self._static = {
            id(s): self._bind(s) for s in (*plan.prepare, *plan.run) if not _uses_temps(s)
        }

    def prepare(self) -> None:
        self._execute(self.plan.prepare)

    def call(self) -> None:
        self._execute(self.plan.run)

    # ------------------------------------------------------------------

    def _execute(self, steps: Sequence[P.Step]) -> None:
        for step in steps:
            bound = self._static.get(id(step)) or self._bind(step)
            if isinstance(step, P.Launch):
                self.launcher.triton(self.plan, step, bound[0], bound[1])
            elif isinstance(step, P.CudaLaunch):
                self.launcher.cuda(self.plan, step, bound[0])
            else:
                self._aten(step, bound[0], bound[1])

    def _aten(self, step: P.AtenCall, args: tuple, kwargs: dict) -> None:
        result = aten_op(step.op)(*args, **kwargs)
        tensors = [result] if isinstance(result, torch.Tensor) else list(result or ())
        for index, t in zip(step.results, tensors, strict=False):
            if index is not None:
                ref = P.Ref(P.BufferKind.TEMP, index)
                self.buffers[ref] = _Buffer(t, t.data_ptr(), 0, _nbytes(t))

    def _bind(self, step: P.Step) -> tuple[tuple, dict]:
        pointers = isinstance(step, P.CudaLaunch) or (
            isinstance(step, P.Launch) and self.launcher.pointers()
        )
        args = tuple(self._arg(a, pointers) for a in step.args)
        kwargs = {k: self._arg(v, pointers) for k, v in getattr(step, "kwargs", ())}
        return args, kwargs

    def _arg(self, arg: P.Arg, pointer: bool) -> Any:
        if isinstance(arg, P.View):
            return self._pointer(arg) if pointer else self.tensor(arg)
        if isinstance(arg, P.Descriptor):
            return _descriptor(self.tensor(arg.base), arg)
        if isinstance(arg, P.TorchDtype):
            return getattr(torch, arg.name)
        if isinstance(arg, P.TritonDtype):
            import triton.language as tl

            return getattr(tl, arg.name)
        if isinstance(arg, tuple):
            return tuple(self._arg(a, pointer) for a in arg)
        if isinstance(arg, str) and arg in P.TORCH_CONSTANTS:
            return {
                "kf:device": self.device,
                "kf:strided": torch.strided,
                "kf:preserve_format": torch.preserve_format,
                "kf:contiguous_format": torch.contiguous_format,
            }[arg]
        return arg

    def _buffer(self, view: P.View) -> _Buffer:
        buf = self.buffers.get(view.ref)
        if buf is None:
            raise P.PlanError(f"{view.ref.kind} {view.ref.index} does not exist (yet)")
        return buf

    def _pointer(self, view: P.View) -> int:
        """A kernel's pointer argument: it must start inside its buffer and keep the
        alignment the kernel was compiled for."""
        buf = self._buffer(view)
        if not buf.lo <= view.offset <= buf.hi:
            raise P.PlanError(
                f"a pointer {view.offset} bytes from {view.ref.kind} {view.ref.index} lies "
                f"outside it ({buf.lo}..{buf.hi})"
            )
        ptr = buf.base + view.offset
        if view.aligned16 and ptr % 16:
            raise P.PlanError("a pointer the kernel was compiled for as 16-byte aligned is not")
        return ptr

    def tensor(self, view: P.View) -> torch.Tensor:
        """The view as a tensor over the buffer's storage; it must fit the buffer."""
        buf = self._buffer(view)
        dtype = getattr(torch, view.dtype)
        itemsize = dtype.itemsize
        lo, hi = view.span_bytes(itemsize)
        if lo < buf.lo or hi > buf.hi:
            raise P.PlanError(
                f"a {view.dtype} view of {view.ref.kind} {view.ref.index} reaches bytes "
                f"{lo}..{hi}, outside it ({buf.lo}..{buf.hi})"
            )
        storage = buf.tensor.untyped_storage()
        start = buf.base + view.offset - storage.data_ptr()
        if start % itemsize or start < 0:
            raise P.PlanError(f"a {view.dtype} view starts at byte {start}, not an element")
        return torch.empty(0, dtype=dtype, device=self.device).set_(
            storage, start // itemsize, view.shape, view.strides
        )


@functools.cache
def aten_op(name: str):
    """torch.ops.aten.<name>.<overload>, for a name on the allow-list only."""
    if name not in P.ATEN_STEPS:
        raise P.PlanError(f"tensor operation {name!r} is not one the judge runs")
    packet, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, packet), overload)


def allocate(plan: P.Plan, device: torch.device) -> list[torch.Tensor]:
    """The plan's workspaces: uninitialised, as a caching allocator would hand them out."""
    return [
        torch.empty(max(w.nbytes, 1), dtype=torch.uint8, device=device) for w in plan.workspaces
    ]


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _check_spec(spec: P.TensorSpec, t: torch.Tensor, what: str) -> None:
    dtype = str(t.dtype).removeprefix("torch.")
    if (dtype, tuple(t.shape), tuple(t.stride())) != (spec.dtype, spec.shape, spec.strides):
        raise P.PlanError(
            f"{what} is {dtype}{list(t.shape)} strides {list(t.stride())}; the plan was "
            f"recorded for {spec.dtype}{list(spec.shape)} strides {list(spec.strides)}"
        )


def _uses_temps(step: P.Step) -> bool:
    return any(v.ref.kind is P.BufferKind.TEMP for v in P.views_of(step))


def _descriptor(base: torch.Tensor, arg: P.Descriptor):
    from triton.tools.tensor_descriptor import TensorDescriptor

    itemsize = base.element_size()
    extent = sum((s - 1) * st for s, st in zip(arg.shape, arg.strides, strict=True) if s)
    if arg.shape and (extent + 1) * itemsize > _nbytes(base) + _slack(base):
        raise P.PlanError("a tensor descriptor reaches past its base tensor")
    return TensorDescriptor(
        base, list(arg.shape), list(arg.strides), list(arg.block_shape), arg.padding
    )


def _slack(base: torch.Tensor) -> int:
    """Bytes of its storage past the view (a descriptor may span more than the view it was
    made from, never more than the storage)."""
    storage = base.untyped_storage()
    return storage.data_ptr() + storage.nbytes() - base.data_ptr() - _nbytes(base)
