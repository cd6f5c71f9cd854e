"""matmul_cutlass_sm90 on the CPU: check() rules, the alignment rule, rendering, the nvcc flags,
the declared C signatures against the C prototypes, and the padded correctness path. The library
itself is the GPU edge: here a stand-in object takes its place (no nvcc, no GPU in CI); the
GPU test at the end builds and runs the real one."""

from __future__ import annotations

import re
import shutil
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from kernels import get_op
from kernels.ops.matmul.families.cutlass_sm90 import (
    CUDA_SOURCE,
    CUTLASS_PIN,
    CutlassSm90Matmul,
)
from kernels.ops.matmul.op import apply_activation, has_residual, split_layout
from kernels.problem import Problem

FAMILY = CutlassSm90Matmul()
REPO = Path(__file__).resolve().parents[2]


def problem(shape=(256, 512, 1024), layout="NN", dtype="bf16") -> Problem:
    return Problem("matmul", shape, dtype, layout)


def point(**changes):
    return {**FAMILY.default(problem()), **changes}


class FakeFunction:
    """Stands in for one exported C function: records calls, returns a fixed value."""

    def __init__(self, result):
        self.result = result
        self.calls: list[tuple] = []

    def __call__(self, *args):
        self.calls.append(args)
        return self.result


class FakeLibrary:
    def __init__(self, abi_version=2):  # matmul's kf_gemm ABI
        self.kf_abi_version = FakeFunction(abi_version)
        self.kf_gemm = FakeFunction(0)
        self.kf_workspace_size = FakeFunction(0)
        self.kf_last_error = FakeFunction("")
        self.kf_describe = FakeFunction("fake")


def fake_library(entry: str, abi_version: int = 1) -> type:
    """A FakeLibrary whose kernel's entry point is `entry` (the ops' other CUTLASS families)."""

    def init(self):
        FakeLibrary.__init__(self, abi_version=abi_version)
        setattr(self, entry, FakeFunction(0))

    return type(f"FakeLibrary_{entry}", (FakeLibrary,), {"__init__": init})


@dataclass(frozen=True)
class FakeCudaLibrary:
    """What the candidate asks harness.cuda_ext to build (name, source, flags, headers)."""

    name: str
    source: str
    flags: tuple[str, ...]
    headers: tuple[str, ...] = ()


@dataclass(frozen=True)
class FakeCFunction:
    """What the candidate declares an exported function to be (result, argument C types)."""

    returns: str
    args: tuple[str, ...] = ()


def fake_loader(monkeypatch, family, library=FakeLibrary):
    """A function importing `family`'s rendered candidates, whose `harness.cuda_ext` is a
    stand-in returning `library()` (kernels/ imports nothing of harness/; the build is the
    edge here): (prob, params) -> (module, what it asked to build)."""
    loaded = []

    def fake_load_library(lib, functions):
        loaded.append(lib)
        built = library()
        built.declared = functions
        return built

    cuda_ext = types.ModuleType("harness.cuda_ext")
    cuda_ext.CudaLibrary = FakeCudaLibrary
    cuda_ext.CFunction = FakeCFunction
    cuda_ext.load_library = fake_load_library
    package = types.ModuleType("harness")
    package.cuda_ext = cuda_ext
    monkeypatch.setitem(sys.modules, "harness", package)
    monkeypatch.setitem(sys.modules, "harness.cuda_ext", cuda_ext)

    def _load(prob, params):
        module = types.ModuleType("cutlass_candidate")  # fresh each time: a new import
        exec(compile(family.render(prob, params), "cutlass_candidate", "exec"), module.__dict__)
        return module, loaded[-1]

    return _load


@pytest.fixture
def load(monkeypatch):
    return fake_loader(monkeypatch, FAMILY)


def test_the_source_is_pasted_whole_and_the_render_is_deterministic():
    p = problem()
    source = FAMILY.render(p, point())
    assert CUDA_SOURCE in source
    assert source == FAMILY.render(p, dict(reversed(list(point().items()))))
    assert f'CUTLASS = "{CUTLASS_PIN}"' in source
    compile(source, FAMILY.name, "exec")


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ("NN", {"KF_A_K_MAJOR": "1", "KF_B_K_MAJOR": "0", "KF_BIAS": "0", "KF_ACT": "0"}),
        ("NT+bias", {"KF_A_K_MAJOR": "1", "KF_B_K_MAJOR": "1", "KF_BIAS": "1", "KF_ACT": "0"}),
        ("TN+bias+gelu", {"KF_A_K_MAJOR": "0", "KF_B_K_MAJOR": "0", "KF_ACT": "3"}),
        ("NN+bias+silu", {"KF_BIAS": "1", "KF_ACT": "2"}),
        ("NT+bias+gelu_erf", {"KF_BIAS": "1", "KF_ACT": "4", "KF_RES": "0"}),
        ("NT+res", {"KF_BIAS": "0", "KF_ACT": "0", "KF_RES": "1"}),
        ("NN+bias+res", {"KF_B_K_MAJOR": "0", "KF_BIAS": "1", "KF_RES": "1"}),
    ],
)
def test_the_flags_carry_layout_epilogue_and_point(load, layout, expected):
    params = point(SCHEDULER="streamk", DECOMPOSITION="streamk", TILE_N=192, STAGES=3)
    module, lib = load(problem(layout=layout, dtype="fp16"), params)
    flags = dict(f[2:].split("=", 1) for f in lib.flags if f.startswith("-DKF_"))
    assert {k: flags[k] for k in expected} == expected
    assert flags["KF_ELEM"] == "1"  # fp16
    assert (flags["KF_TILE_N"], flags["KF_SCHEDULER"], flags["KF_STAGES"]) == ("192", "1", "3")
    assert "-gencode=arch=compute_90a,code=sm_90a" in lib.flags
    assert lib.headers == (CUTLASS_PIN,)
    batched = {**params, "SCHEDULER": "batched_splitk", "DECOMPOSITION": "splitk", "SPLITS": 4}
    assert "-DKF_SCHEDULER=2" in load(problem(layout=layout, dtype="fp16"), batched)[1].flags
    # Run-time settings are not in the flags: one library serves every raster/swizzle/split.
    other = load(problem(layout=layout, dtype="fp16"), {**params, "RASTER": "along_m"})[1]
    assert other.flags == lib.flags and other.source == lib.source


def assert_declared_as_in_c(module, source: str) -> None:
    """The C functions a candidate declares are the C source's exported ones, argument for
    argument, and its ABI version is the source's."""
    declared = module._LIB.declared
    assert set(declared) == set(re.findall(r"\n[\w *]+? (kf_\w+)\(", source))
    for name, function in declared.items():
        found = re.search(rf"\n([\w *]+?) {name}\(([^)]*)\)", source)
        assert found is not None, name
        returns, proto = found.groups()
        kinds = [re.sub(r"\s*\w+$", "", p.strip()) for p in proto.split(",") if p.strip()]
        # A tensor is passed as its address: a void* in C.
        args = ["void*" if k == "tensor" else k for k in function.args]
        assert args == [k.replace(" *", "*").replace("const void*", "void*") for k in kinds], name
        assert function.returns == returns.replace(" *", "*"), name
    assert re.search(r'extern "C" \{[\s\S]*int64_t kf_workspace_size', source)
    assert f"int kf_abi_version() {{ return {module.ABI_VERSION}; }}" in source


def test_the_declared_signatures_match_the_c_prototypes(load):
    module, _ = load(problem(), point())
    assert_declared_as_in_c(module, CUDA_SOURCE)


def test_the_kernel_gets_the_tensors_strides_and_stream_in_prototype_order(load):
    """The launch passes tensors (the binding takes their addresses) where the prototype has
    pointers; an error code raises with the library's message."""
    prob = problem((64, 128, 256), "NN")
    module, _ = load(prob, FAMILY.default(prob))
    a, b = torch.zeros(64, 256), torch.zeros(256, 128)
    out = torch.zeros(64, 128)
    stream = types.SimpleNamespace(cuda_stream=1234)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module.torch.cuda, "current_stream", lambda device=None: stream)
        module._launch(a, b, None, None, out)
        residual = torch.zeros(64, 136)[:, :128]
        module._launch(a, b, None, residual, out)
        plain, added = module._LIB.kf_gemm.calls
        assert plain[:5] == (a, b, out, None, None) and plain[5:12] == (
            64,
            128,
            256,
            256,
            128,
            128,
            0,
        )
        assert added[4] is residual and added[11] == 136
        assert plain[-3:] == (None, 0, 1234)
        module._LIB.kf_gemm.result, module._LIB.kf_last_error.result = 7, "misaligned"
        with pytest.raises(RuntimeError, match=r"kf_cutlass_sm90: misaligned \(code 7\)"):
            module._launch(a, b, None, None, out)


def _logical(a, b, layout):
    operands, _, _ = split_layout(layout)
    return (a.T if operands[0] == "T" else a), (b.T if operands[1] == "T" else b)


@pytest.mark.parametrize(
    ("shape", "layout"),
    [
        ((3, 5, 7), "NN"),
        ((17, 33, 65), "TN+bias+relu"),
        ((9, 20, 13), "NT+bias+gelu"),
        ((9, 20, 13), "TN+bias+res"),
    ],
)
def test_odd_shapes_take_the_padded_path_and_stay_exact(load, shape, layout):
    """The padded path hands the kernel only aligned operands and keeps the valid part; the
    kernel is stood in for by the same math on what it is given."""
    prob = problem(shape, layout, dtype="fp16")
    module, _ = load(prob, FAMILY.default(prob))
    op = get_op("matmul")
    inputs = op.make_inputs(prob, seed=3, device="cpu")
    a, b = inputs[0], inputs[1]
    _, has_bias, activation = split_layout(layout)
    bias = inputs[2] if has_bias else None
    residual = inputs[-1] if has_residual(layout) else None
    seen = []

    def kernel(a_p, b_p, bias_p, residual_p, out_p):
        assert module.fast_path_blocker(a_p, b_p, bias_p, residual_p, out_p) is None
        seen.append((tuple(a_p.shape), tuple(b_p.shape), tuple(out_p.shape)))
        x, y = _logical(a_p.float(), b_p.float(), layout)
        c = apply_activation(x @ y + (bias_p.float() if has_bias else 0), activation)
        out_p.copy_(c + (residual_p.float() if residual_p is not None else 0))

    module._launch = kernel
    out = torch.full((shape[0], shape[1]), float("nan"), dtype=torch.float16)
    assert module.fast_path_blocker(a, b, bias, residual, out) is not None
    module._run_padded(a, b, bias, residual, out)
    ref = op.reference(prob, *inputs)
    assert torch.allclose(out.double(), ref, rtol=4e-3, atol=2e-3)
    assert len(seen) == 1 and all(s % 8 == 0 for s in seen[0][2][1:])


def test_aligned_tensors_take_the_fast_path_and_views_do_not(load):
    prob = problem((64, 128, 256), "NN")
    module, _ = load(prob, FAMILY.default(prob))
    a = torch.zeros(64, 256, dtype=torch.bfloat16)
    b = torch.zeros(256, 128, dtype=torch.bfloat16)
    out = torch.zeros(64, 128, dtype=torch.bfloat16)
    assert module.fast_path_blocker(a, b, None, None, out) is None
    assert "a" in module.fast_path_blocker(a[:, 1:], b, None, None, out)  # base off 16 bytes
    assert "b" in module.fast_path_blocker(a, b.T.contiguous().T, None, None, out)  # col-major
    assert "bias" in module.fast_path_blocker(a, b, torch.zeros(256)[::2], None, out)
    assert module.fast_path_blocker(a, b, None, torch.zeros_like(out), out) is None
    assert "residual" in module.fast_path_blocker(a, b, None, torch.zeros(64, 129)[:, 1:], out)


def test_run_refuses_cpu_tensors_with_a_clear_message(load):
    prob = problem((64, 128, 256), "NN")
    module, _ = load(prob, FAMILY.default(prob))
    a, b = torch.zeros(64, 256), torch.zeros(256, 128)
    with pytest.raises(TypeError, match="bf16 tensors only"):
        module.run(a, b, out=torch.zeros(64, 128))
    a, b = a.bfloat16(), b.bfloat16()
    with pytest.raises(RuntimeError, match="CUDA tensors"):
        module.run(a, b, out=torch.zeros(64, 128, dtype=torch.bfloat16))


BATCHED = {
    "TILE_M": 64,
    "TILE_N": 128,
    "CLUSTER_M": 1,
    "SCHEDULE": "pingpong",
    "SCHEDULER": "batched_splitk",
    "SPLITS": 4,
    "DECOMPOSITION": "splitk",
}


@pytest.mark.gpu
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="builds with nvcc")
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize(
    ("shape", "layout", "changes"),
    [
        ((512, 1024, 2048), "NN", {}),
        ((3, 5, 7), "NN", {}),  # the padded path on the same library
        ((256, 2048, 7168), "NN", {"SCHEDULER": "streamk", "SPLITS": 4, "DECOMPOSITION": "splitk"}),
        ((128, 1536, 7168), "NT+bias+gelu", BATCHED),
        ((17, 33, 65), "NT+bias+gelu", BATCHED),  # the padded path through batched split-K
        ((12608, 3072, 768), "NT+bias+gelu_erf", {}),  # ViT-B/16's fc1, exact GELU
        ((64, 3072, 768), "NT+bias+gelu_erf", BATCHED),
        ((2048, 3584, 3584), "NT+res", {}),  # Qwen2-7B's o_proj with its residual
        ((300, 1024, 4104), "NT+bias+res", {"SCHEDULER": "streamk", "DECOMPOSITION": "heuristic"}),
        ((128, 1536, 7168), "NN+res", {"TILE_N": 128, "SCHEDULE": "pingpong"}),
        ((17, 33, 65), "NT+bias+res", BATCHED),  # padded, the residual added by the reduce
    ],
)
def test_the_built_kernel_is_correct_on_the_gpu(shape, layout, changes):
    from kernels.checking import check_source

    prob = problem(shape, layout)
    params = {**FAMILY.default(prob), **changes}
    failures = check_source(get_op("matmul"), prob, FAMILY.render(prob, params), device="cuda")
    assert not failures
