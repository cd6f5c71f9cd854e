"""A launch plan: what an untrusted candidate's run() does at one problem shape, as plain data.

The trust boundary (harness/README.md, "Trust boundary") keeps an untrusted candidate's host
code out of the judge's process. Its run() executes only inside its sandbox, once per shape,
under a recorder (harness/child/recorder.py) that writes down every kernel launch and every
tensor operation it makes instead of performing them. What comes back is a Plan: kernels as
binaries (cubins, by hash) or, under Triton's CPU interpreter, as names of the module's
@triton.jit functions; the buffers they touch as references to the call's inputs, its output
or buffers the plan allocates; and the steps in order. The judge checks and times *the plan*,
launched by its own host code on buffers it allocated and poisoned (harness/replay.py): what
was verified is exactly what ran.

A plan is hostile data until `Plan.from_json` has checked every field: types, sizes, names on
allow-lists (tensor operations, dtypes, Triton signature types). Nothing in it is ever
evaluated as code.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

PLAN_VERSION = 1
# Elements of random guard values on each side of every output buffer the judge hands out
# (CUDA-L2 uses 16384 for big GEMMs). The recorder lays its outputs out the same way, so a
# plan's pointers keep their offsets and alignment on the judge's buffers.
GUARD_ELEMENTS = 4096


def guarded_output(
    empty_strided: Callable[..., torch.Tensor], shape: Sequence[int], dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(padded, out): the output with GUARD_ELEMENTS on each side, as the recorder and the judge
    both lay it out; `empty_strided(shape, strides, dtype)` allocates where the caller wants."""
    n = math.prod(shape)
    padded = empty_strided((2 * GUARD_ELEMENTS + n,), (1,), dtype)
    return padded, padded[GUARD_ELEMENTS : GUARD_ELEMENTS + n].view(tuple(shape))


def guard_bytes(out: torch.Tensor) -> int:
    return GUARD_ELEMENTS * out.element_size()


MAX_STEPS = 4096  # per phase (prepare, run) of one plan
MAX_DIMS = 8
MAX_NESTING = 4  # lists of lists of arguments
MAX_GRID = 2**31 - 1
MAX_BUFFER_BYTES = 2**36  # one workspace (64 GiB): the GPU's memory is the real bound
MAX_PRESET_BYTES = 64 * 2**20  # all captured constant buffers of one plan together
MAX_KERNELS = 256
MAX_TEXT = 256  # names, dtype names, signature types

# Tensor dtypes a plan may name (torch's own names).
DTYPES = frozenset(
    {
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "int8",
        "uint8",
        "int16",
        "int32",
        "int64",
        "bool",
        "float8_e4m3fn",
        "float8_e5m2",
    }
)
# triton.language dtypes passed as constexpr arguments (interpreter replay needs the value).
TL_DTYPES = frozenset(
    {
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "int1",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float8e4nv",
        "float8e5",
    }
)

# aten operations a plan may contain, as "name.overload". Views and metadata queries are not
# steps (the recorder follows them through storage); allocations become plan workspaces.
# What is left is what the judge's process may run for a candidate: copies, fills, casts and
# plain tensor math, and the vendor GEMMs (which a problem may forbid: harness.ops).
ATEN_STEPS = frozenset(
    {
        "copy_.default",
        "fill_.Scalar",
        "zero_.default",
        "clone.default",
        "_to_copy.default",
        "add.Tensor",
        "add_.Tensor",
        "add.Scalar",
        "sub.Tensor",
        "sub_.Tensor",
        "mul.Tensor",
        "mul_.Tensor",
        "mul.Scalar",
        "div.Tensor",
        "div_.Tensor",
        "div.Scalar",
        "neg.default",
        "exp.default",
        "log.default",
        "sqrt.default",
        "rsqrt.default",
        "sigmoid.default",
        "tanh.default",
        "relu.default",
        "silu.default",
        "gelu.default",
        "pow.Tensor_Scalar",
        "clamp.default",
        "maximum.default",
        "minimum.default",
        "where.self",
        "sum.dim_IntList",
        "mean.dim",
        "amax.default",
        "cat.default",
        "mm.default",
        "mm.out",
        "addmm.default",
        "addmm.out",
        "bmm.default",
        "bmm.out",
        "baddbmm.default",
    }
)

# Non-data values torch operations take (device, layout, memory format), as the recorder
# writes them; the replay maps each back, the device always to the judge's own.
TORCH_CONSTANTS = frozenset(
    {"kf:device", "kf:strided", "kf:preserve_format", "kf:contiguous_format"}
)

# Triton signature types: what the judge's launcher (Triton's own generated C) accepts.
_SCALAR_SIG = r"(i1|i8|i16|i32|i64|u1|u8|u16|u32|u64|fp16|bf16|fp32|f32|fp64)"
_POINTER_SIG = r"\*k?(i1|i8|i16|i32|i64|u1|u8|u16|u32|u64|fp16|bf16|fp32|fp64|fp8e4nv|fp8e5)"
_DESC_SIG = r"tensordesc<[a-z0-9]{2,9}\[[0-9, ]{1,40}\](,[a-z0-9_ ]{1,40})?>"
SIGNATURE_TYPE = re.compile(rf"^({_SCALAR_SIG}|{_POINTER_SIG}|constexpr|nvTmaDesc|{_DESC_SIG})$")
# CUDA kernel parameter kinds (harness.cuda_ext.CudaKernel).
CUDA_PARAMS = frozenset({"tensor", "i32", "u32", "i64", "u64", "f32", "f64"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,200}$")


class PlanError(ValueError):
    """A plan that cannot be recorded, or that the judge refuses to run; says why."""


class BufferKind(enum.StrEnum):
    INPUT = "input"  # the index-th input of the call
    OUTPUT = "output"  # `out` (inside the judge's guard bands)
    WORKSPACE = "workspace"  # allocated by the plan (torch.empty / zeros... in prepare or run)
    PRESET = "preset"  # a tensor that existed before prepare() (made at import): its bytes
    TEMP = "temp"  # the result of a tensor operation step


@dataclass(frozen=True)
class Ref:
    kind: BufferKind
    index: int = 0


@dataclass(frozen=True)
class View:
    """A tensor as the candidate passed it: `offset` bytes from the buffer's base pointer
    (the data pointer of the input, output or allocation; negative only into the output's
    guard band), then dtype, shape and strides in elements."""

    ref: Ref
    offset: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    aligned16: bool = True  # its data pointer was a multiple of 16 when recorded

    def span_bytes(self, itemsize: int) -> tuple[int, int]:
        """[first, last+1) byte offsets this view can touch, from the buffer's base."""
        if any(s == 0 for s in self.shape):
            return self.offset, self.offset
        lo = hi = 0
        for size, stride in zip(self.shape, self.strides, strict=True):
            step = (size - 1) * stride
            if step < 0:
                lo += step
            else:
                hi += step
        return self.offset + lo * itemsize, self.offset + (hi + 1) * itemsize


@dataclass(frozen=True)
class Descriptor:
    """A host-side TMA descriptor (triton.tools.tensor_descriptor.TensorDescriptor)."""

    base: View
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block_shape: tuple[int, ...]
    padding: str = "zero"


@dataclass(frozen=True)
class TorchDtype:
    name: str  # torch.<name>


@dataclass(frozen=True)
class TritonDtype:
    name: str  # triton.language.<name> (a constexpr argument)


Scalar = bool | int | float | str | None
Arg = View | Descriptor | TorchDtype | TritonDtype | Scalar | tuple["Arg", ...]


@dataclass(frozen=True)
class TritonKernel:
    """A compiled Triton kernel (binary: sha256 of its cubin), or under the interpreter the
    name of the module's @triton.jit function (`attr`; binary "")."""

    name: str
    binary: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    signature: tuple[tuple[str, Any], ...] = ()  # (argument name, type), in order
    constants: tuple[tuple[Any, Any], ...] = ()  # constexpr (position or name, value)
    arg_names: tuple[str, ...] = ()
    attr: str = ""


@dataclass(frozen=True)
class CudaKernel:
    """A `__global__` function compiled to a cubin by nvcc in the sandbox (CudaKernel)."""

    name: str
    binary: str
    params: tuple[str, ...]


@dataclass(frozen=True)
class Launch:
    kernel: int  # index into Plan.kernels (a TritonKernel)
    grid: tuple[int, int, int]
    args: tuple[Arg, ...]
    kwargs: tuple[tuple[str, Arg], ...] = ()  # interpreter only: constexprs and launch options


@dataclass(frozen=True)
class CudaLaunch:
    kernel: int  # index into Plan.kernels (a CudaKernel)
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int
    cluster: tuple[int, int, int]
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class AtenCall:
    op: str  # "name.overload" in ATEN_STEPS
    args: tuple[Arg, ...]
    kwargs: tuple[tuple[str, Arg], ...] = ()
    results: tuple[int | None, ...] = ()  # the temp index of each tensor result (None: aliases)


Step = Launch | CudaLaunch | AtenCall


@dataclass(frozen=True)
class Workspace:
    nbytes: int
    phase: str  # "prepare" or "run": when the candidate allocated it


@dataclass(frozen=True)
class Preset:
    binary: str  # sha256 of its bytes
    nbytes: int


@dataclass(frozen=True)
class TensorSpec:
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    problem: dict[str, Any]  # Problem.to_dict() of the shape it was recorded at
    inputs: tuple[TensorSpec, ...]
    output: TensorSpec
    kernels: tuple[TritonKernel | CudaKernel, ...]
    workspaces: tuple[Workspace, ...]
    presets: tuple[Preset, ...]
    prepare: tuple[Step, ...]
    run: tuple[Step, ...]
    interpreted: bool = False  # kernels are the module's functions (Triton's CPU interpreter)
    version: int = PLAN_VERSION

    def binaries(self) -> set[str]:
        found = {k.binary for k in self.kernels if k.binary}
        return found | {p.binary for p in self.presets}

    def aten_ops(self) -> set[str]:
        return {s.op for s in (*self.prepare, *self.run) if isinstance(s, AtenCall)}

    def kernel_names(self) -> list[str]:
        return sorted({k.name for k in self.kernels})

    def to_json(self) -> dict[str, Any]:
        return _encode(self)

    @classmethod
    def from_json(cls, data: Any) -> Plan:
        """The plan, checked field by field; PlanError says what is wrong."""
        plan = _Decoder().plan(data)
        _check_plan(plan)
        return plan


# ---------------------------------------------------------------- encoding


def _encode(value: Any) -> Any:
    if isinstance(value, Plan):
        return {
            "version": value.version,
            "problem": value.problem,
            "inputs": [_encode(s) for s in value.inputs],
            "output": _encode(value.output),
            "kernels": [_encode(k) for k in value.kernels],
            "workspaces": [{"nbytes": w.nbytes, "phase": w.phase} for w in value.workspaces],
            "presets": [{"binary": p.binary, "nbytes": p.nbytes} for p in value.presets],
            "prepare": [_encode(s) for s in value.prepare],
            "run": [_encode(s) for s in value.run],
            "interpreted": value.interpreted,
        }
    if isinstance(value, TensorSpec):
        return {"dtype": value.dtype, "shape": list(value.shape), "strides": list(value.strides)}
    if isinstance(value, TritonKernel):
        return {
            "type": "triton",
            "name": value.name,
            "binary": value.binary,
            "metadata": value.metadata,
            "signature": [[k, _plain(v)] for k, v in value.signature],
            "constants": [[_plain(k), _encode(v)] for k, v in value.constants],
            "arg_names": list(value.arg_names),
            "attr": value.attr,
        }
    if isinstance(value, CudaKernel):
        return {
            "type": "cuda",
            "name": value.name,
            "binary": value.binary,
            "params": list(value.params),
        }
    if isinstance(value, Launch):
        return {
            "type": "launch",
            "kernel": value.kernel,
            "grid": list(value.grid),
            "args": [_encode(a) for a in value.args],
            "kwargs": [[k, _encode(v)] for k, v in value.kwargs],
        }
    if isinstance(value, CudaLaunch):
        return {
            "type": "cuda_launch",
            "kernel": value.kernel,
            "grid": list(value.grid),
            "block": list(value.block),
            "shared": value.shared,
            "cluster": list(value.cluster),
            "args": [_encode(a) for a in value.args],
        }
    if isinstance(value, AtenCall):
        return {
            "type": "aten",
            "op": value.op,
            "args": [_encode(a) for a in value.args],
            "kwargs": [[k, _encode(v)] for k, v in value.kwargs],
            "results": list(value.results),
        }
    if isinstance(value, View):
        return {
            "type": "view",
            "ref": [str(value.ref.kind), value.ref.index],
            "offset": value.offset,
            "dtype": value.dtype,
            "shape": list(value.shape),
            "strides": list(value.strides),
            "aligned16": value.aligned16,
        }
    if isinstance(value, Descriptor):
        return {
            "type": "descriptor",
            "base": _encode(value.base),
            "shape": list(value.shape),
            "strides": list(value.strides),
            "block_shape": list(value.block_shape),
            "padding": value.padding,
        }
    if isinstance(value, TorchDtype):
        return {"type": "torch_dtype", "name": value.name}
    if isinstance(value, TritonDtype):
        return {"type": "triton_dtype", "name": value.name}
    if isinstance(value, tuple):
        return {"type": "list", "items": [_encode(v) for v in value]}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise PlanError(f"cannot encode {type(value).__name__} in a plan")


def _plain(value: Any) -> Any:
    """Signature types and constant keys: strings, ints, or (nested) tuples of them."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------- decoding and checks


class _Decoder:
    """Strict decoding: every field typed and bounded, nothing beyond what the format has."""

    def plan(self, data: Any) -> Plan:
        d = self._dict(data, "plan")
        if d.get("version") != PLAN_VERSION:
            raise PlanError(f"plan version {d.get('version')!r}; this judge reads {PLAN_VERSION}")
        kernels = tuple(
            self.kernel(k) for k in self._list(d.get("kernels"), "kernels", MAX_KERNELS)
        )
        workspaces = tuple(
            Workspace(self._int(w.get("nbytes"), 0, MAX_BUFFER_BYTES), self._phase(w.get("phase")))
            for w in (
                self._dict(x, "workspace")
                for x in self._list(d.get("workspaces"), "workspaces", MAX_STEPS)
            )
        )
        presets = tuple(
            Preset(self._sha(p.get("binary")), self._int(p.get("nbytes"), 0, MAX_PRESET_BYTES))
            for p in (
                self._dict(x, "preset") for x in self._list(d.get("presets"), "presets", MAX_STEPS)
            )
        )
        problem = self._dict(d.get("problem"), "problem")
        return Plan(
            problem={
                "op": self._text(problem.get("op")),
                "shape": [
                    self._int(s, 0, 2**40)
                    for s in self._list(problem.get("shape"), "shape", MAX_DIMS)
                ],
                "dtype": self._text(problem.get("dtype")),
                "layout": self._text(problem.get("layout", "")),
            },
            inputs=tuple(self.spec(s) for s in self._list(d.get("inputs"), "inputs", 64)),
            output=self.spec(d.get("output")),
            kernels=kernels,
            workspaces=workspaces,
            presets=presets,
            prepare=tuple(self.step(s) for s in self._list(d.get("prepare"), "prepare", MAX_STEPS)),
            run=tuple(self.step(s) for s in self._list(d.get("run"), "run", MAX_STEPS)),
            interpreted=self._bool(d.get("interpreted", False)),
        )

    def spec(self, data: Any) -> TensorSpec:
        d = self._dict(data, "tensor spec")
        return TensorSpec(
            self._dtype(d.get("dtype")), self._dims(d.get("shape")), self._strides(d.get("strides"))
        )

    def kernel(self, data: Any) -> TritonKernel | CudaKernel:
        d = self._dict(data, "kernel")
        if d.get("type") == "cuda":
            params = tuple(self._text(p) for p in self._list(d.get("params"), "params", 128))
            if not set(params) <= CUDA_PARAMS:
                raise PlanError(f"unknown CUDA parameter kinds {sorted(set(params) - CUDA_PARAMS)}")
            return CudaKernel(self._name(d.get("name")), self._sha(d.get("binary")), params)
        if d.get("type") != "triton":
            raise PlanError(f"unknown kernel type {d.get('type')!r}")
        binary = d.get("binary", "")
        signature = tuple(
            (self._name(pair[0]), self._sig(pair[1]))
            for pair in (self._pair(x) for x in self._list(d.get("signature"), "signature", 512))
        )
        constants = tuple(
            (self._const_key(pair[0]), self.arg(pair[1], 0))
            for pair in (self._pair(x) for x in self._list(d.get("constants"), "constants", 512))
        )
        return TritonKernel(
            name=self._name(d.get("name")),
            binary=self._sha(binary) if binary else "",
            metadata=self._metadata(d.get("metadata", {})),
            signature=signature,
            constants=constants,
            arg_names=tuple(
                self._name(n) for n in self._list(d.get("arg_names"), "arg_names", 512)
            ),
            attr=self._name(d["attr"]) if d.get("attr") else "",
        )

    def step(self, data: Any) -> Step:
        d = self._dict(data, "step")
        kind = d.get("type")
        if kind == "launch":
            return Launch(
                kernel=self._int(d.get("kernel"), 0, MAX_KERNELS),
                grid=self._triple(d.get("grid"), MAX_GRID),
                args=tuple(self.arg(a, 0) for a in self._list(d.get("args"), "args", 512)),
                kwargs=self._kwargs(d.get("kwargs", [])),
            )
        if kind == "cuda_launch":
            return CudaLaunch(
                kernel=self._int(d.get("kernel"), 0, MAX_KERNELS),
                grid=self._triple(d.get("grid"), MAX_GRID),
                block=self._triple(d.get("block"), 1024),
                shared=self._int(d.get("shared"), 0, 1 << 20),
                cluster=self._triple(d.get("cluster"), 16),
                args=tuple(self.arg(a, 0) for a in self._list(d.get("args"), "args", 512)),
            )
        if kind == "aten":
            op = self._text(d.get("op"))
            if op not in ATEN_STEPS:
                raise PlanError(f"tensor operation {op!r} is not one the judge runs")
            results = tuple(
                None if r is None else self._int(r, 0, MAX_STEPS * 8)
                for r in self._list(d.get("results"), "results", 8)
            )
            return AtenCall(
                op=op,
                args=tuple(self.arg(a, 0) for a in self._list(d.get("args"), "args", 64)),
                kwargs=self._kwargs(d.get("kwargs", [])),
                results=results,
            )
        raise PlanError(f"unknown step type {kind!r}")

    def arg(self, data: Any, depth: int) -> Arg:
        if depth > MAX_NESTING:
            raise PlanError("arguments nested too deeply")
        if data is None or isinstance(data, bool):
            return data
        if isinstance(data, int):
            return self._int(data, -(2**63), 2**64 - 1)
        if isinstance(data, float):
            return data
        if isinstance(data, str):
            return self._text(data)
        d = self._dict(data, "argument")
        kind = d.get("type")
        if kind == "view":
            return self.view(d)
        if kind == "descriptor":
            return Descriptor(
                base=self.view(self._dict(d.get("base"), "descriptor base")),
                shape=self._dims(d.get("shape")),
                strides=self._strides(d.get("strides")),
                block_shape=self._dims(d.get("block_shape")),
                padding=self._choice(d.get("padding", "zero"), ("zero", "nan")),
            )
        if kind == "torch_dtype":
            return TorchDtype(self._dtype(d.get("name")))
        if kind == "triton_dtype":
            return TritonDtype(self._choice(d.get("name"), TL_DTYPES))
        if kind == "list":
            return tuple(self.arg(v, depth + 1) for v in self._list(d.get("items"), "list", 512))
        raise PlanError(f"unknown argument type {kind!r}")

    def view(self, d: dict) -> View:
        ref = self._list(d.get("ref"), "ref", 2)
        if len(ref) != 2:
            raise PlanError("a buffer reference is [kind, index]")
        try:
            kind = BufferKind(ref[0])
        except ValueError:
            raise PlanError(f"unknown buffer kind {ref[0]!r}") from None
        shape = self._dims(d.get("shape"))
        strides = self._strides(d.get("strides"))
        if len(shape) != len(strides):
            raise PlanError("a view's shape and strides differ in length")
        return View(
            ref=Ref(kind, self._int(ref[1], 0, MAX_STEPS * 8)),
            offset=self._int(d.get("offset"), -MAX_BUFFER_BYTES, MAX_BUFFER_BYTES),
            dtype=self._dtype(d.get("dtype")),
            shape=shape,
            strides=strides,
            aligned16=self._bool(d.get("aligned16", True)),
        )

    # -- primitives

    def _kwargs(self, data: Any) -> tuple[tuple[str, Arg], ...]:
        return tuple(
            (self._name(pair[0]), self.arg(pair[1], 0))
            for pair in (self._pair(x) for x in self._list(data, "kwargs", 64))
        )

    def _metadata(self, data: Any) -> dict[str, Any]:
        d = self._dict(data, "kernel metadata")
        if len(d) > 128:
            raise PlanError("kernel metadata has too many fields")
        out: dict[str, Any] = {}
        for key, value in d.items():
            out[self._name(key)] = self._json_value(value, 0)
        return out

    def _json_value(self, value: Any, depth: int) -> Any:
        if depth > MAX_NESTING + 2:
            raise PlanError("kernel metadata nested too deeply")
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return self._text(value, limit=4096)
        if isinstance(value, list):
            return [self._json_value(v, depth + 1) for v in self._list(value, "metadata", 4096)]
        if isinstance(value, dict):
            return {self._text(k): self._json_value(v, depth + 1) for k, v in value.items()}
        raise PlanError(f"kernel metadata holds a {type(value).__name__}")

    def _sig(self, value: Any) -> Any:
        if isinstance(value, list):
            return tuple(self._sig(v) for v in self._list(value, "signature", 64))
        text = self._text(value)
        if not SIGNATURE_TYPE.match(text):
            raise PlanError(f"unknown Triton signature type {text!r}")
        return text

    def _const_key(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._name(value)
        if isinstance(value, list):
            return tuple(self._int(v, 0, 512) for v in self._list(value, "constant key", 8))
        return self._int(value, 0, 512)

    @staticmethod
    def _dict(value: Any, what: str) -> dict:
        if not isinstance(value, dict):
            raise PlanError(f"{what}: expected an object")
        return value

    @staticmethod
    def _list(value: Any, what: str, limit: int) -> list:
        if not isinstance(value, list):
            raise PlanError(f"{what}: expected a list")
        if len(value) > limit:
            raise PlanError(f"{what}: more than {limit} entries")
        return value

    @staticmethod
    def _pair(value: Any) -> list:
        if not isinstance(value, list) or len(value) != 2:
            raise PlanError("expected a [key, value] pair")
        return value

    @staticmethod
    def _int(value: Any, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise PlanError(f"expected an integer in [{lo}, {hi}], got {value!r:.60}")
        return value

    @staticmethod
    def _bool(value: Any) -> bool:
        if not isinstance(value, bool):
            raise PlanError(f"expected true or false, got {value!r:.60}")
        return value

    @staticmethod
    def _text(value: Any, limit: int = MAX_TEXT) -> str:
        if not isinstance(value, str) or len(value) > limit:
            raise PlanError(f"expected a string of at most {limit} characters")
        return value

    def _name(self, value: Any) -> str:
        text = self._text(value)
        if not _NAME.match(text):
            raise PlanError(f"not a name: {text!r:.60}")
        return text

    def _choice(self, value: Any, allowed) -> str:
        text = self._text(value)
        if text not in allowed:
            raise PlanError(f"{text!r} is not one of the allowed values")
        return text

    def _dtype(self, value: Any) -> str:
        return self._choice(value, DTYPES)

    def _sha(self, value: Any) -> str:
        text = self._text(value)
        if not re.fullmatch(r"[0-9a-f]{64}", text):
            raise PlanError("a binary is named by its sha256 (64 hex digits)")
        return text

    @staticmethod
    def _phase(value: Any) -> str:
        if value not in ("prepare", "run"):
            raise PlanError(f"workspace phase {value!r}")
        return value

    def _dims(self, value: Any) -> tuple[int, ...]:
        return tuple(self._int(v, 0, 2**40) for v in self._list(value, "shape", MAX_DIMS))

    def _strides(self, value: Any) -> tuple[int, ...]:
        return tuple(self._int(v, -(2**40), 2**40) for v in self._list(value, "strides", MAX_DIMS))

    def _triple(self, value: Any, hi: int) -> tuple[int, int, int]:
        items = self._list(value, "dims", 3)
        if len(items) != 3:
            raise PlanError("grid, block and cluster sizes have three entries")
        a, b, c = (self._int(v, 1, hi) for v in items)
        return a, b, c


def _check_plan(plan: Plan) -> None:
    """What the format alone cannot say: every index in range, binaries where they must be."""
    if plan.interpreted:
        for k in plan.kernels:
            if not isinstance(k, TritonKernel) or not k.attr or k.binary:
                raise PlanError("an interpreted plan names @triton.jit functions, not binaries")
    else:
        for k in plan.kernels:
            if not k.binary:
                raise PlanError(f"kernel {k.name} has no binary")
    if sum(p.nbytes for p in plan.presets) > MAX_PRESET_BYTES:
        raise PlanError(f"captured constants exceed {MAX_PRESET_BYTES >> 20} MiB")
    temps: set[int] = set()
    for phase in (plan.prepare, plan.run):
        for step in phase:
            if isinstance(step, Launch | CudaLaunch):
                if step.kernel >= len(plan.kernels):
                    raise PlanError(f"a launch names kernel {step.kernel} of {len(plan.kernels)}")
                want = CudaKernel if isinstance(step, CudaLaunch) else TritonKernel
                if not isinstance(plan.kernels[step.kernel], want):
                    raise PlanError("a launch names a kernel of the other kind")
            if isinstance(step, CudaLaunch):
                kernel = plan.kernels[step.kernel]
                if isinstance(kernel, CudaKernel) and len(step.args) != len(kernel.params):
                    raise PlanError(f"{kernel.name} takes {len(kernel.params)} arguments")
            for view in views_of(step):
                _check_ref(plan, view.ref, temps)
            if isinstance(step, AtenCall):
                temps |= {r for r in step.results if r is not None}


def _check_ref(plan: Plan, ref: Ref, temps: set[int]) -> None:
    limit = {
        BufferKind.INPUT: len(plan.inputs),
        BufferKind.OUTPUT: 1,
        BufferKind.WORKSPACE: len(plan.workspaces),
        BufferKind.PRESET: len(plan.presets),
    }
    if ref.kind is BufferKind.TEMP:
        if ref.index not in temps:
            raise PlanError(f"a step uses temp {ref.index} before any step made it")
    elif ref.index >= limit[ref.kind]:
        raise PlanError(f"a step names {ref.kind} {ref.index} of {limit[ref.kind]}")


def views_of(step: Step):
    """Every View an argument of the step holds (descriptors' bases included): the judge
    bounds-checks each one against its buffer before the step runs."""
    stack: list[Any] = [*step.args, *(v for _, v in getattr(step, "kwargs", ()))]
    while stack:
        arg = stack.pop()
        if isinstance(arg, View):
            yield arg
        elif isinstance(arg, Descriptor):
            yield arg.base
        elif isinstance(arg, tuple):
            stack.extend(arg)
