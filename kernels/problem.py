"""What a problem is: one op at one shape, dtype and layout, and the contract every op meets.

A Problem is plain, hashable data that travels everywhere (the web form, Celery, the agent
state, the harness's subprocess). An Op knows how to make inputs for a problem, compute the
reference, count the work and judge closeness. A Family renders candidate source for one
point of its parameter space.

Candidate contract (ARCHITECTURE.md, with R1.3's destination passing): a candidate is the
source of one self-contained module defining

    def run(*inputs, out) -> None        # fill `out` (allocated and poisoned by the harness)
    def prepare(*inputs) -> None         # optional, untimed, must not depend on input values

where `inputs` come from Op.make_inputs and `out` has Op.output_spec's shape and dtype.
"""

from __future__ import annotations

import abc
import contextlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

DTYPES: dict[str, torch.dtype] = {
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp32": torch.float32,
}
# Other spellings people write (torch's names, with or without "torch."), case-insensitive.
DTYPE_SPELLINGS: dict[str, str] = {
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float": "fp32",
}


def canonical_dtype(text: str) -> str:
    """The canonical name ("bf16" for "torch.bfloat16", "BF16" or "bfloat16"); anything else
    is returned as written (Op.validate then says which dtypes the op takes)."""
    name = text.strip().lower().removeprefix("torch.")
    return name if name in DTYPES else DTYPE_SPELLINGS.get(name, text.strip())


# Upper bound on elements of any one tensor a problem may describe: 2**34 elements is 32 GiB
# in bf16, beyond what a single GPU test should ever allocate.
MAX_ELEMENTS = 2**34


class ProblemError(ValueError):
    """A problem description that cannot be run; the message is shown to the user as is."""


@dataclass(frozen=True)
class Problem:
    op: str
    shape: tuple[int, ...]  # sizes in the op's `dims` order, e.g. (M, N, K) for matmul
    dtype: str = "bf16"  # a key of DTYPES
    layout: str = ""  # op-specific variant, e.g. "NN"/"TN" for matmul; "" when the op has one

    @property
    def key(self) -> str:
        """Stable text id, used in URLs, leaderboards and file names."""
        dims = "x".join(str(s) for s in self.shape)
        return f"{self.op}/{dims}/{self.dtype}" + (f"/{self.layout}" if self.layout else "")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def with_shape(self, *shape: int) -> Problem:
        return Problem(self.op, tuple(shape), self.dtype, self.layout)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "layout": self.layout,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Problem:
        return cls(
            op=str(data["op"]),
            shape=tuple(int(s) for s in data["shape"]),
            dtype=str(data.get("dtype", "bf16")),
            layout=str(data.get("layout", "")),
        )


@dataclass(frozen=True)
class Tolerance:
    """Closeness test relative to magnitude: |out - ref| <= atol + rtol * |ref|, elementwise.

    Outputs that are all zero cannot pass against a non-zero reference, and NaN never passes.
    """

    rtol: float
    atol: float


@dataclass(frozen=True)
class MeasuredBest:
    """The best speedup our families measured over an op's baseline on a kind of device, and
    the results file that holds the runs: what a plan may expect of them there."""

    speedup: float
    results: str  # benchmarks/results/...


@dataclass(frozen=True)
class OutputSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class ParamSpace:
    """A family's search space: each parameter's allowed values, plus a validity rule."""

    choices: Mapping[str, Sequence[Any]]
    # Names the parameters whose product must fit the hardware, for humans and the planner.
    constraints: tuple[str, ...] = field(default=())

    def size(self) -> int:
        n = 1
        for values in self.choices.values():
            n *= len(values)
        return n


class Family(abc.ABC):
    """A parameterized kernel that renders to a complete candidate module per parameter point."""

    name: str
    op: str
    backend: str = "triton"  # "triton" or "cuda"
    description: str = ""
    # The op layouts this family's kernels read (None: every layout of its op); check()
    # refuses the others.
    layouts: tuple[str, ...] | None = None

    def serves(self, layout: str) -> bool:
        return self.layouts is None or layout in self.layouts

    @abc.abstractmethod
    def space(self, problem: Problem) -> ParamSpace: ...

    @abc.abstractmethod
    def default(self, problem: Problem) -> dict[str, Any]:
        """A sensible starting point for this problem (always valid)."""

    def check(self, problem: Problem, params: Mapping[str, Any]) -> str | None:
        """Why this point is invalid for this problem (e.g. shared memory), or None if valid."""
        if not self.serves(problem.layout):
            served = ", ".join(repr(x) for x in self.layouts or ())
            return f"{self.name} reads layout {served}, not {problem.layout!r}"
        space = self.space(problem)
        for name, value in params.items():
            if name not in space.choices:
                return f"unknown parameter {name!r}"
            if value not in space.choices[name]:
                return f"{name}={value!r} is not one of {list(space.choices[name])}"
        missing = set(space.choices) - set(params)
        return f"missing parameters {sorted(missing)}" if missing else None

    @abc.abstractmethod
    def render(self, problem: Problem, params: Mapping[str, Any]) -> str:
        """Complete, readable candidate source; the same params give byte-identical text."""

    # The parameters that change what is compiled; the others are read at run time. A family
    # that names them builds once per combination, not per point or shape, so a machine can
    # build them all ahead of any job (harness/library.py). (): the family is not built ahead.
    build_params: tuple[str, ...] = ()

    def library_points(self, problem: Problem) -> list[dict[str, Any]]:
        """One valid point per distinct build for this problem's class (dtype, layout,
        epilogue), nearest the default first: every combination of `build_params` from the
        space, the run-time parameters from `runtime_for`; builds check() refuses are left out."""
        if not self.build_params:
            return []
        choices = self.space(problem).choices
        default = self.default(problem)
        points = []
        for combo in itertools.product(*(choices[name] for name in self.build_params)):
            built = dict(zip(self.build_params, combo, strict=True))
            point = {**default, **built, **self.runtime_for(problem, built)}
            if self.check(problem, point) is None:
                points.append(point)
        return sorted(points, key=lambda q: sum(q[k] != default[k] for k in self.build_params))

    def runtime_for(self, problem: Problem, built: Mapping[str, Any]) -> dict[str, Any]:
        """Run-time parameters a library point of this build starts with (the default's,
        unless the build needs others)."""
        return {}


class Op(abc.ABC):
    """One folder under kernels/ops/ implements this; see kernels/README.md."""

    name: str
    dims: tuple[str, ...]  # names of the shape entries, e.g. ("M", "N", "K")
    dtypes: tuple[str, ...] = ("fp16", "bf16", "fp32")
    layouts: tuple[str, ...] = ("",)
    description: str = ""

    def layout_note(self) -> str:
        """Layouts beyond `layouts` this op takes, in words for the submission form's help."""
        return ""

    def layout_error(self, layout: str) -> str | None:
        """Why this op cannot take `layout` (None: it can)."""
        if layout in self.layouts:
            return None
        if self.layouts == ("",):
            return f"{self.name} takes no layout, not {layout!r}"
        layouts = ", ".join(repr(x) if x == "" else x for x in self.layouts)
        return f"{self.name} supports layouts {layouts}, not {layout!r}"

    def numerics(self, problem: Problem) -> contextlib.AbstractContextManager:
        """The global numeric settings the problem runs under (TF32 for an fp32 matmul that
        the model runs as TF32): its baseline runs inside them, and a compiled baseline is
        built and called inside them, since Inductor reads them when it compiles."""
        return contextlib.nullcontext()

    def validate(self, problem: Problem) -> None:
        """Raise ProblemError with a message a user can act on."""
        if problem.op != self.name:
            raise ProblemError(f"problem is for op {problem.op!r}, not {self.name!r}")
        if len(problem.shape) != len(self.dims):
            want = "x".join(self.dims)
            raise ProblemError(f"{self.name} takes a shape {want}, got {len(problem.shape)} sizes")
        for dim, size in zip(self.dims, problem.shape, strict=True):
            if size < 1:
                raise ProblemError(f"{dim}={size}: sizes must be positive")
        if problem.dtype not in self.dtypes:
            raise ProblemError(
                f"{self.name} supports dtypes {', '.join(self.dtypes)}, not {problem.dtype!r}"
            )
        if (why := self.layout_error(problem.layout)) is not None:
            raise ProblemError(why)
        for spec in self.input_shapes(problem) + [self.output_spec(problem).shape]:
            n = 1
            for s in spec:
                n *= s
            if n > MAX_ELEMENTS:
                raise ProblemError(f"a tensor of shape {tuple(spec)} is too large ({n:,} elements)")

    def size(self, problem: Problem, dim: str) -> int:
        return problem.shape[self.dims.index(dim)]

    @abc.abstractmethod
    def input_shapes(self, problem: Problem) -> list[tuple[int, ...]]: ...

    @abc.abstractmethod
    def output_spec(self, problem: Problem) -> OutputSpec: ...

    @abc.abstractmethod
    def make_inputs(
        self, problem: Problem, *, seed: int, device: str | torch.device
    ) -> tuple[torch.Tensor, ...]:
        """Seeded random inputs of any shape and dtype (same seed -> same values)."""

    @abc.abstractmethod
    def adversarial_inputs(
        self, problem: Problem, *, seed: int, device: str | torch.device
    ) -> dict[str, tuple[torch.Tensor, ...]]:
        """Named hard cases: large dynamic range, near-zero variance, identical rows..."""

    @abc.abstractmethod
    def reference(self, problem: Problem, *inputs: torch.Tensor) -> torch.Tensor:
        """The exact answer, computed in float32 or float64 (never the problem's low dtype)."""

    @abc.abstractmethod
    def baseline(
        self, problem: Problem, *inputs: torch.Tensor, out: torch.Tensor
    ) -> torch.Tensor | tuple[torch.Tensor, ...] | None:
        """What users run today (torch eager), timed as they run it. It writes `out` where
        PyTorch has a destination form (matmul's out=); where it has none (SDPA, layer_norm,
        an activation after a GEMM) it returns its own result and leaves `out` alone, as the
        user's code does: a copy into `out` charged torch a pass over the output that no model
        makes (ViT's attention: cuDNN's 48 us timed as 58, benchmarks/results/
        sdpa_backends_h200.json). Where users' code makes several tensors that our output packs
        into one (qkv_rotary's q, k and v), it returns them and `pack` joins them, outside the
        timing. Read its value through `baseline_output`."""

    def baseline_result(
        self, problem: Problem, *inputs: torch.Tensor, out: torch.Tensor
    ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """What the baseline made, as users' code has it: `out`, or what it returned instead
        (what a compiled baseline returns, so that Inductor compiles no packing copy)."""
        result = self.baseline(problem, *inputs, out=out)
        return out if result is None else result

    def baseline_output(
        self, problem: Problem, *inputs: torch.Tensor, out: torch.Tensor
    ) -> torch.Tensor:
        """The baseline's value as the op's one output tensor (for checks, outside timing)."""
        result = self.baseline_result(problem, *inputs, out=out)
        return self.pack(problem, result) if isinstance(result, tuple) else result

    def pack(self, problem: Problem, parts: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The op's output from the separate tensors its baseline returns (see `baseline`)."""
        raise TypeError(f"{self.name}'s baseline returned {len(parts)} tensors, not one")

    @abc.abstractmethod
    def flops(self, problem: Problem) -> int: ...

    @abc.abstractmethod
    def bytes_moved(self, problem: Problem) -> int:
        """Fewest bytes through device memory: each input read once, each output written once."""

    def unfused_bytes(self, problem: Problem) -> int:
        """Bytes the model's unfused form moves besides this kernel's own: the elementwise
        passes (an activation, silu * up, the rotary) that a fused kernel does in registers,
        each reading and writing its tensors once, as torch.compile fuses them. So it is the
        least a fusion saves; 0 for an op that is what PyTorch runs (a plain GEMM)."""
        return 0

    @abc.abstractmethod
    def tolerance(self, problem: Problem) -> Tolerance: ...

    @abc.abstractmethod
    def sweep(self, problem: Problem) -> list[Problem]:
        """Correctness shapes around this problem: tiny, odd, non-power-of-two, and the workload."""

    @abc.abstractmethod
    def families(self) -> list[Family]: ...

    def fixed_dims(self, problem: Problem) -> frozenset[str]:
        """Dims that a smaller shape made from this problem keeps (the screen's tail shape,
        the interpreter's shrink): those its layout ties to what the inputs mean."""
        return frozenset()

    def library_layout(self, problem: Problem) -> str:
        """What of the problem's layout its compiled builds depend on: the machine's kernel
        library (harness/library.py) keeps one class of builds per op, dtype and this. The
        layout itself, unless it also names what only the kernels' run time reads."""
        return problem.layout

    def library_problem(self, shape: tuple[int, ...], dtype: str, library_layout: str) -> Problem:
        """The problem a library class's builds are made for, at the library's shape for the
        op: one every build of the class accepts."""
        return Problem(self.name, shape, dtype, library_layout)

    def families_for(self, problem: Problem) -> list[Family]:
        """The families whose kernels read this problem's layout: a search, a plan or a
        fallback tries these (qkv_rotary's dual family has no point for an "i8" layout)."""
        return [f for f in self.families() if f.serves(problem.layout)]

    def measured_best(self, device_name: str) -> MeasuredBest | None:
        """Where our families were measured against this op's baseline on such a device and
        stand below what its roofline allows (attention against cuDNN's Hopper kernel), that
        measurement: the model plan expects no more of them there. None elsewhere."""
        return None

    def starting_points(self, problem: Problem) -> list[tuple[str, dict[str, Any]]]:
        """Where a search should start for this problem's shape class, best first.

        (family name, partial params) pairs; missing parameters come from the family's
        default, and every point still passes family.check() before it is rendered. Ops keep
        them in kernels/ops/<name>/starting_points.py with a note of where they were measured.
        The benchmark's pools and the agents' first planned step both start from them.
        """
        return []
