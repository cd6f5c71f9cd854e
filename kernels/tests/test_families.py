"""Every family renders valid, deterministic candidates that are correct in the interpreter."""

import random
import shutil
import subprocess

import pytest

from kernels import all_ops
from kernels.checking import check_source, run_candidate
from kernels.problem import Problem
from kernels.tests.test_ops import small_problem

FAMILIES = [(name, family) for name, op in sorted(all_ops().items()) for family in op.families()]
IDS = [family.name for _, family in FAMILIES]
TRITON = [(n, f) for n, f in FAMILIES if f.backend == "triton"]
TRITON_IDS = [f.name for _, f in TRITON]


def sample_points(family, problem, count, seed=0):
    """The default plus `count` random valid points of the family's space."""
    rng = random.Random(seed)
    points = [family.default(problem)]
    choices = family.space(problem).choices
    for _ in range(200):
        if len(points) > count:
            break
        point = {k: rng.choice(list(v)) for k, v in choices.items()}
        if family.check(problem, point) is None and point not in points:
            points.append(point)
    return points


@pytest.mark.parametrize(("op_name", "family"), FAMILIES, ids=IDS)
def test_its_default_is_valid_and_renders_deterministically(op_name, family):
    problem = small_problem(op_name, "fp16", family)
    params = family.default(problem)
    assert family.check(problem, params) is None
    source = family.render(problem, params)
    assert source == family.render(problem, dict(reversed(list(params.items()))))
    compile(source, family.name, "exec")
    assert "def run(" in source


@pytest.mark.parametrize(("op_name", "family"), FAMILIES, ids=IDS)
def test_its_check_rejects_points_outside_the_space(op_name, family):
    problem = small_problem(op_name, "fp16", family)
    params = dict(family.default(problem))
    first = next(iter(params))
    assert family.check(problem, {**params, first: -12345}) is not None
    assert family.check(problem, {**params, "NOT_A_PARAM": 1}) is not None


@pytest.mark.parametrize(("op_name", "family"), FAMILIES, ids=IDS)
def test_a_diff_between_two_points_shows_only_the_changed_constants(op_name, family):
    problem = small_problem(op_name, "fp16", family)
    a = family.default(problem)
    b = next(p for p in sample_points(family, problem, 20, seed=1)[1:] if p != a)
    lines_a = family.render(problem, a).splitlines()
    lines_b = family.render(problem, b).splitlines()
    changed = [x for x, y in zip(lines_a, lines_b, strict=True) if x != y]
    changed_names = {k for k in a if a[k] != b[k]}
    assert len(lines_a) == len(lines_b)
    assert all(line.startswith(tuple(changed_names) + ("Point:",)) for line in changed)


@pytest.mark.parametrize(("op_name", "family"), TRITON, ids=TRITON_IDS)
def test_its_candidates_are_correct_in_the_interpreter(op_name, family):
    op = all_ops()[op_name]
    base = small_problem(op_name, "fp16", family)
    layouts = op.layouts if op_name != "matmul" else ("NN", "NT", "TN+bias+gelu")
    for layout in filter(family.serves, layouts):
        laid = Problem(base.op, base.shape, base.dtype, layout)
        for problem in (laid, tiny_odd(op, laid)):
            for params in sample_points(family, problem, 2):
                failures = check_source(op, problem, family.render(problem, params))
                assert not failures, f"{params}: {failures}"


def tiny_odd(op, problem):
    """The op's own odd-sized sweep entry (sweep()[1]: a tail in every dimension)."""
    odd = op.sweep(problem)[1]
    assert any(s % 2 for s in odd.shape)
    return odd


def test_a_broken_candidate_is_caught():
    op = all_ops()["rmsnorm"]
    problem = small_problem("rmsnorm", "fp16")
    family = op.families()[0]
    source = family.render(problem, family.default(problem)).replace("* rstd[:, None]", "")
    assert check_source(op, problem, source)
    out = run_candidate(op, problem, source, op.make_inputs(problem, seed=0, device="cpu"))
    assert out.isfinite().all()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (no GPU needed)")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_cuda_starter_device_code_compiles(dtype, tmp_path):
    """nvcc accepts the WMMA kernel with torch's extension flags (no GPU, no torch headers)."""
    op = all_ops()["matmul"]
    family = next(f for f in op.families() if f.backend == "cuda")
    problem = Problem("matmul", (127, 96, 200), dtype, "NT+bias+gelu")
    source = family.render(problem, family.default(problem))
    cuda = source.split('CUDA_SOURCE = r"""')[1].split('"""')[0]
    device_only = cuda[: cuda.index("void matmul(")]
    for header in ("#include <torch/extension.h>", "#include <ATen/cuda/CUDAContext.h>"):
        device_only = device_only.replace(header, "")
    path = tmp_path / "wmma.cu"
    path.write_text(device_only)
    elem = "__nv_bfloat16" if dtype == "bf16" else "__half"
    flags = [
        "-std=c++17",
        "-D__CUDA_NO_HALF_OPERATORS__",
        "-D__CUDA_NO_HALF_CONVERSIONS__",
        "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-gencode=arch=compute_90a,code=sm_90a",
        f"-DELEM={elem}",
        "-DBLOCK_M=128",
        "-DBLOCK_N=128",
        "-DBLOCK_K=32",
        "-DWARPS_M=2",
        "-DWARPS_N=4",
        "-DHAS_BIAS=1",
        "-DACTIVATION=3",
    ]
    result = subprocess.run(
        ["nvcc", *flags, "-c", str(path), "-o", str(tmp_path / "wmma.o")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_decode_attention_reads_strided_cache_slices():
    """A model passes k and v as slices of a longer cache buffer (and q as a column slice of a
    fused projection): only the head dim is contiguous."""
    import torch

    from kernels.candidate import load_module
    from kernels.checking import compare

    op = all_ops()["decode_attention"]
    problem = Problem("decode_attention", (1, 2, 3, 20, 16), "fp16")
    family = op.families()[0]
    q, k, v = op.make_inputs(problem, seed=0, device="cpu")
    cache_k = torch.zeros(1, 2, 32, 16, dtype=k.dtype)
    cache_v = torch.zeros(1, 2, 32, 16, dtype=v.dtype)
    cache_k[:, :, :20], cache_v[:, :, :20] = k, v
    wide_q = torch.zeros(1, 2, 3, 48, dtype=q.dtype)
    wide_q[..., 8:24] = q
    out = torch.empty(1, 2, 3, 16, dtype=q.dtype)
    module = load_module(family.render(problem, family.default(problem)))
    module.run(wide_q[..., 8:24], cache_k[:, :, :20], cache_v[:, :, :20], out=out)
    assert compare(out, op.reference(problem, q, k, v), op.tolerance(problem)).passed
