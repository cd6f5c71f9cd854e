"""Record what a candidate's prepare()/run() do, as a Plan, without running any kernel.

Runs inside the candidate's sandbox. While a call is recorded:

- a Triton launch (compiled: `CompiledKernel.run`; interpreted: `InterpretedFunction.run`)
  becomes a Launch step with its grid and arguments; the compiled kernel's cubin is kept
  (by sha256), an interpreted one is named by its module attribute; nothing is launched;
- a CUDA kernel launch (harness.cuda_ext.CudaKernel) becomes a CudaLaunch with its cubin;
- every torch operation passes through a TorchDispatchMode: views and metadata queries run
  for real (they touch no data), allocations become plan workspaces (really allocated, so
  pointers exist, but never filled), the operations in plan.ATEN_STEPS become AtenCall steps
  (their results allocated from shapes computed on the meta device, not computed), and any
  other operation (reading a value back, a CPU round trip, an operation the judge does not
  run) stops the recording with a message that says which.

Every tensor an argument names is located by its storage: an input, the output, a workspace
or temp made during the call, or a tensor made before prepare() (at import), whose bytes are
captured as a preset. The candidate can rewrite any of this (it runs in the same process):
that only changes the plan it hands the judge, which checks whatever plan it gets.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from harness import plan as P

# Allocations: recorded as workspaces (and, for the filled ones, a fill_ step).
_EMPTY = {
    "empty.memory_format",
    "empty_strided.default",
    "empty_like.default",
    "new_empty.default",
    "new_empty_strided.default",
}
_FILLED = {
    "zeros.default": 0,
    "zeros_like.default": 0,
    "new_zeros.default": 0,
    "ones.default": 1,
    "ones_like.default": 1,
    "new_ones.default": 1,
}
_FULL = {"full.default", "full_like.default", "new_full.default"}
# Queries that return no tensor and read no values.
_METADATA = {
    "sym_size.int",
    "sym_stride.int",
    "sym_numel.default",
    "sym_storage_offset.default",
    "is_contiguous.default",
    "is_contiguous.memory_format",
    "is_non_overlapping_and_dense.default",
    "is_same_size.default",
    "size.int",
    "stride.int",
    "numel.default",
    "dim.default",
}
# Operations that write their first argument (or `out=`) and return it: not computed here.
_IN_PLACE = {"copy_.default", "fill_.Scalar", "zero_.default"}
_OUT_VARIANTS = {"mm.out", "addmm.out", "bmm.out"}

MAX_PRESET_BYTES = P.MAX_PRESET_BYTES


class RecordError(RuntimeError):
    """The call did something a plan cannot hold; the message says what, for the coder."""


@dataclass
class _Buffer:
    ref: P.Ref
    base: int  # the data pointer offsets are taken from
    keep: object = None  # a strong reference: a freed block must not be reused under us


@dataclass
class Recording:
    plan: P.Plan
    blobs: dict[str, bytes]  # sha256 -> bytes: cubins and presets the plan names


class Recorder:
    """One per process; `install()` once, then `record()` per shape."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.interpreted = device != "cuda"
        self.module: Any = None  # the candidate module (interpreted kernels are its attributes)
        self._active = False
        self._reset()

    # ------------------------------------------------------------------ public

    def install(self) -> None:
        """Route Triton launches, CUDA kernel launches and host libraries through here."""
        from harness import cuda_ext

        cuda_ext.launch_hook = self._cuda_launch
        cuda_ext.host_libraries_refused = (
            "an untrusted candidate cannot load a host library (load_cuda, load_library): its "
            'host code would have to run in the judge\'s process. Write `extern "C" '
            "__global__` kernels and launch them with harness.cuda_ext.CudaKernel."
        )
        if self.interpreted:
            from triton.runtime.interpreter import InterpretedFunction

            recorder = self

            def interpreted_run(fn, *args, grid, warmup, **kwargs):
                if warmup or not recorder._active:
                    raise RecordError("a Triton kernel was launched outside the recorded call")
                recorder._interpreted_launch(fn, grid, args, kwargs)

            InterpretedFunction.run = interpreted_run
        else:
            from triton.compiler.compiler import CompiledKernel

            recorder = self

            def compiled_run(kernel):
                def launch(gx, gy, gz, stream, function, packed, launch_meta, enter, exit_, *args):
                    if not recorder._active:
                        raise RecordError("a Triton kernel was launched outside the recorded call")
                    recorder._triton_launch(kernel, (gx, gy, gz), args)

                return launch

            # No _init_handles(): the kernel is never loaded or launched in this process.
            CompiledKernel.run = property(compiled_run)  # type: ignore[method-assign, assignment]

    def record(
        self,
        problem: dict[str, Any],
        inputs: Sequence[torch.Tensor],
        out: torch.Tensor,
        prepare: Callable[..., Any] | None,
        run: Callable[..., Any],
    ) -> Recording:
        """prepare(*inputs) then run(*inputs, out=out), recorded; RecordError if it cannot be."""
        self._reset()
        for i, t in enumerate(inputs):
            self._register(t, P.Ref(P.BufferKind.INPUT, i), base=t.data_ptr())
        self._register(out, P.Ref(P.BufferKind.OUTPUT), base=out.data_ptr())
        with _Mode(self):
            self._active = True
            try:
                if prepare is not None:
                    self._phase = "prepare"
                    prepare(*inputs)
                self._phase = "run"
                returned = run(*inputs, out=out)
            finally:
                self._active = False
        if returned is not None:
            raise RecordError(f"run() returned a {type(returned).__name__}; it must fill `out`")
        if not self._steps["run"]:
            raise RecordError(
                "run() launched nothing the judge can replay: no Triton or CudaKernel launch "
                "and no tensor operation was recorded"
            )
        plan = P.Plan(
            problem=problem,
            inputs=tuple(_spec(t) for t in inputs),
            output=_spec(out),
            kernels=tuple(self._kernels),
            workspaces=tuple(self._workspaces),
            presets=tuple(self._presets),
            prepare=tuple(self._steps["prepare"]),
            run=tuple(self._steps["run"]),
            interpreted=self.interpreted,
        )
        # What the judge will read back must be what it can decode.
        checked = P.Plan.from_json(json.loads(json.dumps(plan.to_json())))
        return Recording(checked, dict(self._blobs))

    # ------------------------------------------------------------------ state

    def _reset(self) -> None:
        self._buffers: dict[int, _Buffer] = {}
        self._kernels: list[P.TritonKernel | P.CudaKernel] = []
        self._kernel_index: dict[Any, int] = {}
        self._workspaces: list[P.Workspace] = []
        self._presets: list[P.Preset] = []
        self._preset_bytes = 0
        self._blobs: dict[str, bytes] = {}
        self._steps: dict[str, list[P.Step]] = {"prepare": [], "run": []}
        self._temps = 0
        self._phase = "run"
        self._keep_kernels: list[object] = []
        self._empty: _Buffer | None = None  # kernels stay alive: their ids key _kernel_index

    def _register(self, t: torch.Tensor, ref: P.Ref, *, base: int) -> None:
        key = t.untyped_storage().data_ptr()
        if key:
            self._buffers[key] = _Buffer(ref, base, t)

    def _step(self, step: P.Step) -> None:
        steps = self._steps[self._phase]
        if len(steps) >= P.MAX_STEPS:
            raise RecordError(f"more than {P.MAX_STEPS} launches and operations in one call")
        steps.append(step)

    def _blob(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self._blobs[sha] = data
        return sha

    # ------------------------------------------------------------------ arguments

    def arg(self, value: Any, depth: int = 0) -> P.Arg:
        if depth > P.MAX_NESTING:
            raise RecordError("arguments nested too deeply")
        if isinstance(value, torch.Tensor):
            return self.view(value)
        if value is None or isinstance(value, bool | float | str):
            return value
        if isinstance(value, int):
            if not -(2**63) <= value < 2**64:
                raise RecordError(f"integer argument {value} out of range")
            return value
        if isinstance(value, torch.dtype):
            name = str(value).removeprefix("torch.")
            if name not in P.DTYPES:
                raise RecordError(f"dtype {value} is not one a plan can name")
            return P.TorchDtype(name)
        if isinstance(value, torch.device):
            if value.type != _device(self.device).type:
                raise RecordError(f"a device {value}: the problem runs on {self.device}")
            return "kf:device"
        if value is torch.strided:
            return "kf:strided"
        if value is torch.preserve_format:
            return "kf:preserve_format"
        if value is torch.contiguous_format:
            return "kf:contiguous_format"
        if isinstance(value, list | tuple):
            return tuple(self.arg(v, depth + 1) for v in value)
        descriptor = _descriptor(value)
        if descriptor is not None:
            base, shape, strides, block, padding = descriptor
            return P.Descriptor(self.view(base), shape, strides, block, padding)
        tl_name = _triton_dtype(value)
        if tl_name is not None:
            return P.TritonDtype(tl_name)
        raise RecordError(f"an argument of type {type(value).__name__} cannot be recorded")

    def view(self, t: torch.Tensor) -> P.View:
        if t.device.type != ("cuda" if self.device == "cuda" else "cpu"):
            raise RecordError(f"a tensor on {t.device} (the problem runs on {self.device})")
        if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
            raise RecordError(f"a {type(t).__name__} is not a plain tensor")
        key = t.untyped_storage().data_ptr()
        # No storage at all (zero elements): a workspace of no bytes.
        buf = (self._buffers.get(key) or self._preset(t)) if key else self._empty_buffer()
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in P.DTYPES:
            raise RecordError(f"dtype {t.dtype} is not one a plan can name")
        return P.View(
            ref=buf.ref,
            offset=t.data_ptr() - buf.base if key else 0,
            dtype=dtype,
            shape=tuple(t.shape),
            strides=tuple(t.stride()),
            aligned16=t.data_ptr() % 16 == 0,
        )

    def _empty_buffer(self) -> _Buffer:
        if self._empty is None:
            ref = P.Ref(P.BufferKind.WORKSPACE, len(self._workspaces))
            self._workspaces.append(P.Workspace(0, self._phase))
            self._empty = _Buffer(ref, 0)
        return self._empty

    def _preset(self, t: torch.Tensor) -> _Buffer:
        """A tensor made before prepare() (at import): its storage's bytes go in the plan."""
        storage = t.untyped_storage()
        size = storage.nbytes()
        if self._preset_bytes + size > MAX_PRESET_BYTES:
            raise RecordError(
                f"tensors made at import exceed {MAX_PRESET_BYTES >> 20} MiB; allocate "
                "buffers in prepare() or run() instead"
            )
        with _disable_current_modes():
            whole = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
            data = whole.cpu().numpy().tobytes()
        self._preset_bytes += size
        ref = P.Ref(P.BufferKind.PRESET, len(self._presets))
        self._presets.append(P.Preset(self._blob(data), size))
        buf = _Buffer(ref, storage.data_ptr(), t)
        self._buffers[storage.data_ptr()] = buf
        return buf

    # ------------------------------------------------------------------ launches

    def _triton_launch(self, kernel, grid: tuple[int, int, int], args: tuple) -> None:
        index = self._kernel_index.get(id(kernel))
        if index is None:
            metadata = json.loads(json.dumps(kernel.metadata._asdict(), default=vars))
            src = kernel.src
            constants = getattr(src, "constants", {}) or {}
            record = P.TritonKernel(
                name=kernel.name,
                binary=self._blob(bytes(kernel.asm["cubin"])),
                metadata=metadata,
                signature=tuple((str(k), _plain(v)) for k, v in src.signature.items()),
                constants=tuple((_plain(k), self._constant(v)) for k, v in constants.items()),
                arg_names=tuple(src.fn.arg_names),
            )
            index = self._add_kernel(id(kernel), record, keep=kernel)
        self._step(P.Launch(index, _grid(grid), tuple(self.arg(a) for a in args)))

    def _interpreted_launch(self, fn, grid, args: tuple, kwargs: dict) -> None:
        index = self._kernel_index.get(id(fn))
        if index is None:
            attr = next(
                (name for name, value in vars(self.module or object()).items() if value is fn),
                None,
            )
            if attr is None:
                raise RecordError(
                    f"kernel {getattr(fn, '__name__', fn)!r} is not a module-level "
                    "@triton.jit function of the candidate"
                )
            index = self._add_kernel(id(fn), P.TritonKernel(name=attr, attr=attr), keep=fn)
        names = inspect.getfullargspec(fn.fn).args
        kwargs = {k: v for k, v in kwargs.items() if k in names}
        if callable(grid):
            grid = grid(inspect.getcallargs(fn.fn, *args, **kwargs))
        step = P.Launch(
            index,
            _grid(tuple(grid)),
            tuple(self.arg(a) for a in args),
            tuple((k, self.arg(v)) for k, v in kwargs.items()),
        )
        self._step(step)

    def _cuda_launch(self, kernel, grid, block, shared: int, cluster, args: tuple) -> None:
        from harness import cuda_ext

        if not self._active:
            raise RecordError("a CUDA kernel was launched outside the recorded call")
        if len(args) != len(kernel.params):
            raise RecordError(f"{kernel.name} takes {len(kernel.params)} arguments")
        for kind, value in zip(kernel.params, args, strict=True):
            if kind == "tensor" and not isinstance(value, torch.Tensor):
                raise RecordError(f"{kernel.name}: a tensor parameter got a {type(value).__name__}")
            if kind != "tensor" and isinstance(value, torch.Tensor):
                raise RecordError(f"{kernel.name}: a {kind} parameter got a tensor")
        key = ("cuda", kernel)
        index = self._kernel_index.get(key)
        if index is None:
            cubin = cuda_ext.build_cubin(kernel)
            record = P.CudaKernel(kernel.name, self._blob(cubin), tuple(kernel.params))
            index = self._add_kernel(key, record, keep=kernel)
        self._step(
            P.CudaLaunch(
                index,
                _grid(grid),
                _grid(block),
                int(shared),
                _grid(cluster),
                tuple(self.arg(a) for a in args),
            )
        )

    def _add_kernel(self, key: Any, record: P.TritonKernel | P.CudaKernel, keep: object) -> int:
        if len(self._kernels) >= P.MAX_KERNELS:
            raise RecordError(f"more than {P.MAX_KERNELS} distinct kernels")
        self._kernel_index[key] = len(self._kernels)
        self._kernels.append(record)
        self._keep_kernels.append(keep)
        return len(self._kernels) - 1

    def _constant(self, value: Any) -> P.Arg:
        try:
            return self.arg(value)
        except RecordError:
            return None  # a constexpr the launcher ignores (it skips constexpr positions)

    # ------------------------------------------------------------------ torch operations

    def dispatch(self, func, args: tuple, kwargs: dict) -> Any:
        schema = func._schema
        name = f"{schema.name.removeprefix('aten::')}.{func._overloadname}"
        if not schema.name.startswith("aten::"):
            raise RecordError(f"run() calls {schema.name}, which the judge does not replay")
        if name in _METADATA or func.is_view:
            return func(*args, **kwargs)
        if name in _EMPTY or name in _FILLED or name in _FULL:
            return self._allocate(func, name, args, kwargs)
        if name not in P.ATEN_STEPS:
            raise RecordError(
                f"run() calls torch operation {name}, which the judge does not replay: run() "
                "may launch Triton or CudaKernel kernels and allocate, view, copy or fill "
                "tensors, and use a few tensor operations (harness/plan.py, ATEN_STEPS); it "
                "may not read values back or compute on the CPU"
            )
        op = name
        results = self._results(func, name, args, kwargs)
        temps: list[int | None] = []
        for r in _tensors(results):
            if r.untyped_storage().data_ptr() in self._buffers:
                temps.append(None)  # an alias of an argument (in place)
            else:
                temps.append(self._temp(r))
        step = P.AtenCall(
            op,
            tuple(self.arg(a) for a in args),
            tuple((k, self.arg(v)) for k, v in kwargs.items()),
            tuple(temps),
        )
        self._step(step)
        return results

    def _allocate(self, func, name: str, args: tuple, kwargs: dict) -> torch.Tensor:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type != _device(self.device).type:
            raise RecordError(f"{name} on {device}: the problem runs on {self.device}")
        if name in _EMPTY:
            t = func(*args, **kwargs)
        else:  # the same allocation, never filled here; the fill is a step
            meta = func(*_to_meta(args), **{**kwargs, "device": "meta"})
            t = torch.empty_strided(
                meta.shape, meta.stride(), dtype=meta.dtype, device=_device(self.device)
            )
        if t.device.type != _device(self.device).type:
            raise RecordError(f"{name} made a tensor on {t.device}")
        nbytes = t.untyped_storage().nbytes()
        ref = P.Ref(P.BufferKind.WORKSPACE, len(self._workspaces))
        self._workspaces.append(P.Workspace(nbytes, self._phase))
        self._register(t, ref, base=t.data_ptr())
        if name in _FILLED or name in _FULL:
            value = _FILLED[name] if name in _FILLED else _fill_value(name, args, kwargs)
            self._step(P.AtenCall("fill_.Scalar", (self.view(t), value), (), (None,)))
        return t

    def _results(self, func, name: str, args: tuple, kwargs: dict) -> Any:
        """The op's result tensors, allocated from their meta shapes and left unfilled; an
        in-place op returns its first argument (nothing computed)."""
        for t in _tensors((args, kwargs)):
            self.view(t)  # device, dtype and plain-tensor checks before anything else
        if name in _IN_PLACE or name.split(".")[0].endswith("_"):
            return args[0]
        if name in _OUT_VARIANTS:  # written into `out=`, as the replay will do
            if not isinstance(kwargs.get("out"), torch.Tensor):
                raise RecordError(f"{name} without a tensor `out`")
            return kwargs["out"]
        meta = func(*_to_meta(args), **_to_meta(kwargs))
        return _materialize(meta, _device(self.device))

    def _temp(self, t: torch.Tensor) -> int:
        index = self._temps
        self._temps += 1
        self._register(t, P.Ref(P.BufferKind.TEMP, index), base=t.data_ptr())
        return index


class _Mode(TorchDispatchMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.recorder.dispatch(func, tuple(args), dict(kwargs or {}))


def _device(device: str) -> torch.device:
    return torch.device("cuda" if device == "cuda" else "cpu")


def _spec(t: torch.Tensor) -> P.TensorSpec:
    return P.TensorSpec(str(t.dtype).removeprefix("torch."), tuple(t.shape), tuple(t.stride()))


def _grid(values) -> tuple[int, int, int]:
    dims = [int(v) for v in values] + [1] * (3 - len(values))
    if len(dims) != 3 or any(not 1 <= d <= P.MAX_GRID for d in dims):
        raise RecordError(f"grid/block/cluster {tuple(values)} out of range (1..2**31-1, 3 dims)")
    return dims[0], dims[1], dims[2]


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return tuple(_plain(v) for v in value)
    return value if isinstance(value, str | int) else str(value)


def _tensors(tree: Any):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, list | tuple):
        for item in tree:
            yield from _tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tensors(item)


def _to_meta(tree: Any) -> Any:
    if isinstance(tree, torch.Tensor):
        return torch.empty_strided(tree.shape, tree.stride(), dtype=tree.dtype, device="meta")
    if isinstance(tree, list | tuple):
        return type(tree)(_to_meta(v) for v in tree)
    if isinstance(tree, dict):
        return {k: ("meta" if k == "device" else _to_meta(v)) for k, v in tree.items()}
    return tree


def _materialize(tree: Any, device: torch.device) -> Any:
    if isinstance(tree, torch.Tensor):
        return torch.empty_strided(tree.shape, tree.stride(), dtype=tree.dtype, device=device)
    if isinstance(tree, list | tuple):
        return type(tree)(_materialize(v, device) for v in tree)
    return tree


def _fill_value(name: str, args: tuple, kwargs: dict) -> Any:
    value = kwargs.get("fill_value", args[1] if len(args) > 1 else None)
    if isinstance(value, torch.Tensor) or not isinstance(value, bool | int | float):
        raise RecordError(f"{name} with a fill value that is not a plain number")
    return value


def _descriptor(value: Any):
    """(base, shape, strides, block_shape, padding) of a host TMA descriptor, else None."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:
        return None
    if not isinstance(value, TensorDescriptor):
        return None
    if not isinstance(value.base, torch.Tensor):
        raise RecordError("a tensor descriptor over something that is not a tensor")
    padding = getattr(value, "padding", "zero")
    return (
        value.base,
        tuple(int(s) for s in value.shape),
        tuple(int(s) for s in value.strides),
        tuple(int(s) for s in value.block_shape),
        padding if padding in ("zero", "nan") else "zero",
    )


def _triton_dtype(value: Any) -> str | None:
    try:
        import triton.language as tl
    except ImportError:
        return None
    if not isinstance(value, tl.dtype):
        return None
    for name in P.TL_DTYPES:
        if getattr(tl, name, None) == value:
            return name
    raise RecordError(f"triton dtype {value} is not one a plan can name")
