"""The exact GELU epilogue (nn.GELU()'s default, erf form): every Triton family computes it."""

from kernels import all_ops
from kernels.checking import check_source
from kernels.problem import Problem
from kernels.tests.test_families import sample_points

OP = all_ops()["matmul"]


def test_every_triton_family_computes_the_exact_gelu_epilogue_in_the_interpreter():
    problem = Problem("matmul", (17, 33, 65), "fp16", "NT+bias+gelu_erf")
    OP.validate(problem)
    for family in OP.families():
        if family.backend != "triton":
            continue
        points = [p for p in sample_points(family, problem, 3) if family.check(problem, p) is None]
        assert points, family.name
        assert not check_source(OP, problem, family.render(problem, points[0])), family.name
