"""The residual epilogue ("+res", "+bias+res": `x + o_proj(h)` written by the GEMM): what the
op means, and which families add it."""

import pytest
import torch

from kernels import all_ops
from kernels.checking import check_source
from kernels.problem import Problem
from kernels.tests.test_families import sample_points

OP = all_ops()["matmul"]


@pytest.mark.parametrize("layout", ["NT+res", "NT+bias+res", "TN+res"])
def test_the_residual_is_the_last_input_added_after_the_bias(layout):
    problem = Problem("matmul", (5, 6, 7), "bf16", layout)
    OP.validate(problem)
    inputs = OP.make_inputs(problem, seed=0, device="cpu")
    assert inputs[-1].shape == (5, 6)
    a, b = inputs[0].double(), inputs[1].double()
    product = (a.T if layout.startswith("T") else a) @ (b.T if layout[1] == "T" else b)
    bias = inputs[2].double() if "+bias" in layout else 0
    assert torch.allclose(OP.reference(problem, *inputs), product + bias + inputs[-1].double())
    out = torch.empty(5, 6, dtype=torch.bfloat16)
    out = OP.baseline_output(problem, *inputs, out=out)
    assert torch.allclose(out.double(), OP.reference(problem, *inputs), rtol=2e-2, atol=2e-2)
    # A fused add saves the product's write and its read back.
    assert OP.unfused_bytes(problem) == 2 * 5 * 6 * 2


def test_its_adversarial_residual_spans_rows_far_apart():
    problem = Problem("matmul", (64, 32, 16), "bf16", "NT+bias+res")
    for name, inputs in OP.adversarial_inputs(problem, seed=0, device="cpu").items():
        assert len(inputs) == 4, name
        scales = inputs[-1].float().abs().amax(dim=1)
        assert scales.max() / scales.min() > 64, name


def test_the_families_that_add_no_residual_do_not_serve_its_layouts():
    serving = {f.name for f in OP.families_for(Problem("matmul", (64, 64, 64), "bf16", "NT+res"))}
    assert serving == {"matmul_tiled", "matmul_weight_stream", "matmul_cutlass_sm90"}
    assert len(OP.families_for(Problem("matmul", (64, 64, 64), "bf16", "NT"))) > len(serving)


@pytest.mark.parametrize("name", ["matmul_tiled", "matmul_weight_stream"])
@pytest.mark.parametrize("layout", ["NT+res", "NN+bias+res"])
def test_the_families_that_serve_it_add_it_in_the_interpreter(name, layout):
    """Few rows (a decode step's o_proj and down_proj) with a split, so the weight stream's
    residual is added once, by the program that sums the partials."""
    for shape in ((17, 33, 65), (3, 40, 300)):
        problem = Problem("matmul", shape, "fp16", layout)
        family = next(f for f in OP.families_for(problem) if f.name == name)
        points = [p for p in sample_points(family, problem, 3) if family.check(problem, p) is None]
        for point in points[:2]:
            assert not check_source(OP, problem, family.render(problem, point)), point


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", [f.name for f in OP.families() if f.backend == "triton"])
def test_every_triton_family_still_launches_its_compiled_kernel_on_the_gpu(name):
    # The tiled kernel's residual arguments have defaults the other families leave out; the
    # fast launch (after the first call, straight to the compiled kernel) fills them in.
    family = next(f for f in OP.families() if f.name == name)
    layout = "NT+bias+res" if family.serves("NT+bias+res") else "NT+bias"
    problem = Problem("matmul", (256, 512, 1024), "bf16", layout)
    assert not check_source(
        OP, problem, family.render(problem, family.default(problem)), device="cuda"
    )
