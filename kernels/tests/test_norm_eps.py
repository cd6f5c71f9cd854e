"""A normalization's eps belongs to its problem (kernels/rowwise.py NormOp): Llama 3's RMSNorm
(1e-5) and a ViT's LayerNorm (1e-6) are computed with their own eps, not with the op's."""

import pytest
import torch

from kernels import get_op, parse_problem
from kernels.checking import compare, run_candidate
from kernels.problem import ProblemError


@pytest.mark.parametrize(
    ("op_name", "own", "other"), [("rmsnorm", 1e-6, 1e-5), ("layernorm", 1e-5, 1e-6)]
)
def test_the_layout_names_another_eps_and_only_one_spelling_of_it(op_name, own, other):
    op = get_op(op_name)
    assert op.layout_for(own) == "" and op.eps(parse_problem(op_name, "64x128", "fp16")) == own
    layout = op.layout_for(other)
    assert layout == f"eps={other!r}"
    problem = parse_problem(op_name, "64x128", "fp16", layout)
    assert op.eps(problem) == other and problem.key.endswith(f"/{layout}")
    with pytest.raises(ProblemError, match=f"write '{layout}'"):
        parse_problem(op_name, "64x128", "fp16", f"eps={other:.10f}")
    for bad in ("eps=-1e-05", "eps=abc", "eps=nan", "NN"):
        with pytest.raises(ProblemError, match="eps=<a positive number>"):
            parse_problem(op_name, "64x128", "fp16", bad)


@pytest.mark.parametrize("op_name", ["rmsnorm", "layernorm"])
def test_each_family_computes_the_problems_eps(op_name):
    """Rows small enough that eps decides the result: the kernel matches the reference at the
    problem's eps, and misses the one at the op's own."""
    op = get_op(op_name)
    other = 1e-5 if op_name == "rmsnorm" else 1e-6
    problem = parse_problem(op_name, "8x64", "fp32", op.layout_for(other))
    own = parse_problem(op_name, "8x64", "fp32")
    x, *vectors = op.make_inputs(problem, seed=0, device="cpu")
    x = x * 2e-3  # mean square ~4e-6: eps is no rounding error here
    for family in op.families():
        source = family.render(problem, family.default(problem))
        assert f"EPS = {other!r}" in source
        out = run_candidate(op, problem, source, (x, *vectors))
        assert compare(out, op.reference(problem, x, *vectors), op.tolerance(problem)).passed
        assert not compare(out, op.reference(own, x, *vectors), op.tolerance(problem)).passed
    baseline = torch.empty_like(x)
    baseline = op.baseline_output(problem, x, *vectors, out=baseline)
    assert compare(baseline, op.reference(problem, x, *vectors), op.tolerance(problem)).passed
