"""fp32 matmuls as the model runs them: TF32 ("+tf32"), or left to cuBLAS (refused, with why)."""

import pytest
import torch

from kernels import all_ops, parse_problem
from kernels.checking import check_source, compare
from kernels.ops.matmul.op import to_tf32
from kernels.problem import Problem, ProblemError

OP = all_ops()["matmul"]


def test_an_fp32_matmul_names_tf32_and_only_fp32_does():
    assert parse_problem("matmul", [64, 48, 32], "fp32", "NT+bias+tf32").key == (
        "matmul/64x48x32/fp32/NT+bias+tf32"
    )
    with pytest.raises(ProblemError, match=r"write NT\+tf32 if the model allows TF32"):
        parse_problem("matmul", [64, 48, 32], "fp32", "NT")
    with pytest.raises(ProblemError, match=r"\+tf32 is for fp32 inputs, not bf16"):
        parse_problem("matmul", [64, 48, 32], "bf16", "NT+tf32")
    with pytest.raises(ProblemError, match="supports layouts"):
        parse_problem("matmul", [64, 48, 32], "fp32", "NX+tf32")
    assert "+tf32" in OP.layout_note()


def test_the_baseline_runs_inside_tf32_and_puts_the_setting_back(monkeypatch):
    problem = Problem("matmul", (33, 40, 72), "fp32", "NT+bias+tf32")
    seen = []
    addmm = torch.addmm

    def spy(*args, **kwargs):  # what the baseline's GEMM runs under
        seen.append(torch.backends.cuda.matmul.allow_tf32)
        return addmm(*args, **kwargs)

    monkeypatch.setattr(torch, "addmm", spy)
    inputs = OP.make_inputs(problem, seed=0, device="cpu")
    out = torch.empty(OP.output_spec(problem).shape)
    before = torch.backends.cuda.matmul.allow_tf32
    out = OP.baseline_output(problem, *inputs, out=out)
    assert seen == [True] and torch.backends.cuda.matmul.allow_tf32 is before
    # The CPU has no TF32: its fp32 GEMM is within TF32's tolerance of the TF32 reference.
    assert compare(out, OP.reference(problem, *inputs), OP.tolerance(problem)).passed
    with OP.numerics(problem):
        assert torch.backends.cuda.matmul.allow_tf32
    assert torch.backends.cuda.matmul.allow_tf32 is before


def test_the_reference_rounds_operands_to_tf32_as_cublas_does():
    # Round to nearest, ties away from zero, on 10 mantissa bits (the low 13 of fp32 dropped).
    one = 1.0 + 2.0**-10
    x = torch.tensor([1.0 + 2.0**-11, 1.0 + 2.0**-12, -(1.0 + 2.0**-11), 3.0, -0.0, float("inf")])
    assert to_tf32(x).tolist() == [one, 1.0, -one, 3.0, -0.0, float("inf")]
    problem = Problem("matmul", (1, 1, 2), "fp32", "NN+tf32")
    a = torch.tensor([[1.0 + 2.0**-11, -1.0]])
    b = torch.tensor([[1.0], [1.0]])
    # fp32 says 2**-11; TF32 (a's first element rounded up) says 2**-10, and so does cuBLAS.
    assert OP.reference(problem, a, b).item() == 2.0**-10


def test_the_tf32_tolerance_admits_tf32_rounding_and_catches_a_wrong_sum():
    problem = Problem("matmul", (64, 96, 4096), "fp32", "NN+tf32")
    a, b = OP.make_inputs(problem, seed=0, device="cpu")
    tf32 = 2.0**-10  # round both operands to 10 mantissa bits, as the tensor cores do

    def to_tf32(t):
        mantissa, exponent = torch.frexp(t)
        return torch.ldexp(torch.round(mantissa / tf32) * tf32, exponent)

    got = to_tf32(a).double() @ to_tf32(b).double()
    ref = OP.reference(problem, a, b)
    tol = OP.tolerance(problem)
    assert ((got - ref).abs() <= tol.atol + tol.rtol * ref.abs()).all()
    wrong = got.clone()
    wrong[:, 0] -= a[:, -1].double() * b[-1, 0].double()  # one K term left out
    assert not ((wrong - ref).abs() <= tol.atol + tol.rtol * ref.abs()).all()


def test_the_triton_families_run_fp32_in_the_interpreter_and_the_cuda_ones_refuse_it():
    from kernels.tests.test_families import sample_points

    problem = Problem("matmul", (17, 33, 65), "fp32", "NT+bias+tf32")
    for family in OP.families():
        if family.backend == "cuda":
            why = family.check(problem, family.default(problem))
            assert why and "fp32 is not built" in why, family.name
            continue
        points = [p for p in sample_points(family, problem, 3) if family.check(problem, p) is None]
        assert points, f"{family.name}: no point fits fp32"
        assert not check_source(OP, problem, family.render(problem, points[0])), family.name
