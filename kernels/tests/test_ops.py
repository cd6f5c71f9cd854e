"""Every op's contract: reference, input generator, counts, sweep, adversarial cases."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernels import all_ops, parse_problem
from kernels.checking import compare
from kernels.problem import Problem, ProblemError
from kernels.shapes import public_problems

OPS = sorted(all_ops())
# Free-form layouts (beyond op.layouts) a family may read alone, at small_problem's sizes.
MORE_LAYOUTS = {"qkv_rotary": ("i8+kv_heads=1",)}


def small_problem(op_name: str, dtype: str = "fp32", family=None) -> Problem:
    """A small, odd-sized problem per op (the interpreter is slow), in the op's first layout
    (or the first that `family` reads)."""
    op = all_ops()[op_name]
    dtype = dtype if dtype in op.dtypes else op.dtypes[0]
    sizes = {"M": 5, "N": 24, "K": 40, "T": 6, "H": 3, "HKV": 1, "D": 16, "B": 2, "S": 24, "F": 40}
    layouts = (*op.layouts, *MORE_LAYOUTS.get(op_name, ()))
    layout = next(x for x in layouts if family is None or family.serves(x))
    if op_name == "matmul" and dtype == "fp32":
        layout += "+tf32"  # an fp32 matmul is a TF32 one (kernels/ops/matmul/op.py)
    return Problem(op_name, tuple(sizes[d] for d in op.dims), dtype, layout)


def test_it_discovers_the_core_ops():
    expected = {"matmul", "rmsnorm", "layernorm", "softmax", "cross_entropy", "rotary", "sum"}
    assert expected <= set(OPS)


@pytest.mark.parametrize("name", OPS)
def test_it_generates_seeded_inputs_of_the_declared_shapes(name):
    op = all_ops()[name]
    problem = small_problem(name)
    a = op.make_inputs(problem, seed=3, device="cpu")
    b = op.make_inputs(problem, seed=3, device="cpu")
    c = op.make_inputs(problem, seed=4, device="cpu")
    assert [tuple(t.shape) for t in a] == [tuple(s) for s in op.input_shapes(problem)]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert any(not torch.equal(x, y) for x, y in zip(a, c, strict=True))


@pytest.mark.parametrize("name", OPS)
def test_its_baseline_matches_its_reference(name):
    op = all_ops()[name]
    problem = small_problem(name)
    inputs = op.make_inputs(problem, seed=0, device="cpu")
    spec = op.output_spec(problem)
    out = torch.full(spec.shape, float("nan"), dtype=spec.dtype)
    out = op.baseline_output(problem, *inputs, out=out)
    ref = op.reference(problem, *inputs)
    assert ref.dtype in (torch.float32, torch.float64)
    assert compare(out, ref, op.tolerance(problem)).passed


class _SeenOps(TorchDispatchMode):
    """The ATen ops a call dispatches."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


# More free-form layouts for the baseline's test: grouped heads (the attention ops), qkv_rotary's
# one-weight layouts (GPT-J's pairs with part of each head turned).
BASELINE_LAYOUTS = {
    "attention": ("causal+kv_heads=1",),
    "decode_attention": ("kv_heads=1",),
    "qkv_rotary": (
        "i8+bias+kv_heads=1",
        "i8+bias+rowscale+kv_heads=1",
        "pairs+rot=8+head_dim=16+kv_heads=1",
    ),
}


@pytest.mark.parametrize("name", OPS)
def test_its_baseline_is_timed_as_users_run_it_never_copied_into_out(name):
    """torch is timed as the user's code runs: where PyTorch has no destination form, the
    baseline returns its own result. A copy into `out` charged it a pass over the output (ViT's
    attention, cuDNN's 48 us timed as 58 on an H200), and every speedup over it looked larger."""
    op = all_ops()[name]
    base = small_problem(name)
    tf32 = "+tf32" if base.layout.endswith("+tf32") else ""
    for layout in (*op.layouts, *MORE_LAYOUTS.get(name, ()), *BASELINE_LAYOUTS.get(name, ())):
        problem = Problem(name, base.shape, base.dtype, layout + tf32)
        inputs = op.make_inputs(problem, seed=0, device="cpu")
        spec = op.output_spec(problem)
        out = torch.full(spec.shape, float("nan"), dtype=spec.dtype)
        with _SeenOps() as calls:
            op.baseline(problem, *inputs, out=out)
        assert "aten.copy_" not in calls.seen, (problem.key, calls.seen)
        result = op.baseline_output(problem, *inputs, out=out)
        assert compare(result, op.reference(problem, *inputs), op.tolerance(problem)).passed


@pytest.mark.parametrize("name", OPS)
def test_its_reference_is_not_fooled_by_a_wrong_answer(name):
    op = all_ops()[name]
    problem = small_problem(name)
    inputs = op.make_inputs(problem, seed=0, device="cpu")
    ref = op.reference(problem, *inputs)
    wrong = ref * 1.1 + 0.1
    assert not compare(wrong, ref, op.tolerance(problem)).passed
    assert not compare(torch.full_like(ref, float("nan")), ref, op.tolerance(problem)).passed


@pytest.mark.parametrize("name", OPS)
def test_its_adversarial_inputs_have_the_declared_shapes(name):
    op = all_ops()[name]
    problem = small_problem(name)
    cases = op.adversarial_inputs(problem, seed=0, device="cpu")
    assert cases
    for inputs in cases.values():
        assert [tuple(t.shape) for t in inputs] == [tuple(s) for s in op.input_shapes(problem)]
        assert torch.isfinite(op.reference(problem, *inputs).double()).all()


@pytest.mark.parametrize("name", OPS)
def test_its_counts_are_positive_and_scale_with_size(name):
    op = all_ops()[name]
    small = small_problem(name)
    big = small.with_shape(*(2 * s for s in small.shape))
    assert 0 < op.flops(small) < op.flops(big)
    assert 0 < op.bytes_moved(small) < op.bytes_moved(big)
    elt = small.torch_dtype.itemsize
    assert op.bytes_moved(small) >= elt * math.prod(op.input_shapes(small)[0])


@pytest.mark.parametrize("name", OPS)
def test_its_sweep_covers_tiny_odd_and_the_workload(name):
    op = all_ops()[name]
    problem = small_problem(name).with_shape(*(s * 8 for s in small_problem(name).shape))
    sweep = op.sweep(problem)
    assert problem in sweep
    assert any(all(s == 1 for s in p.shape) or min(p.shape) <= 3 for p in sweep)
    assert any(any(s % 2 for s in p.shape) for p in sweep)
    for p in sweep:
        op.validate(p)


def test_it_rejects_bad_problems_with_a_readable_message():
    with pytest.raises(ProblemError, match="layout"):
        parse_problem("matmul", "64x64x64", "bf16", "XX")
    with pytest.raises(ProblemError, match="positive"):
        parse_problem("rmsnorm", "0x64", "bf16")


def test_the_public_shape_set_is_valid():
    problems = public_problems()
    names = {p.name for p in problems}
    for expected in ("tiny", "small", "large", "xlarge", "tall", "deep_k", "llm_qkv", "llm_mlp"):
        assert f"matmul/{expected}" in names
    assert any(p.problem.op == "matmul" and p.problem.shape[0] == 1 for p in problems)
    for entry in problems:
        all_ops()[entry.problem.op].validate(entry.problem)


def test_qkv_rotary_with_bias_adds_each_projections_bias_before_the_rotation():
    # Qwen2's q/k/v projections have biases: layout "+bias" takes b_q, b_k, b_v after cos/sin.
    op = all_ops()["qkv_rotary"]
    problem = Problem("qkv_rotary", (5, 3, 1, 16, 40), "fp32", "+bias")
    inputs = op.make_inputs(problem, seed=0, device="cpu")
    assert [tuple(t.shape) for t in inputs] == [tuple(s) for s in op.input_shapes(problem)]
    assert [tuple(t.shape) for t in inputs[6:]] == [(48,), (16,), (16,)]
    for case in op.adversarial_inputs(problem, seed=0, device="cpu").values():
        assert [tuple(t.shape) for t in case] == [tuple(t.shape) for t in inputs]
    out = torch.empty(op.output_spec(problem).shape, dtype=torch.float32)
    out = op.baseline_output(problem, *inputs, out=out)
    ref = op.reference(problem, *inputs)
    assert compare(out, ref, op.tolerance(problem)).passed
    # Added after the rotation instead: q and k come out wrong, v (no rotation) the same.
    x, wq, wk, wv, cos, sin, bq, bk, bv = inputs
    plain = Problem("qkv_rotary", problem.shape, "fp32", "")
    late = op.reference(plain, x, wq, wk, wv, cos, sin) + torch.cat([bq, bk, bv]).double()
    assert not compare(late, ref, op.tolerance(problem)).passed
    assert torch.allclose(late[:, 64:], ref[:, 64:])


@pytest.mark.parametrize(
    ("name", "shape", "layout"),
    [
        ("swiglu_gate", (4, 16, 4096), ""),
        ("swiglu_gate", (4, 16, 4096), "i8"),
        ("swiglu_gate", (4, 16, 4096), "i8+rowscale"),
        ("qkv_rotary", (4, 2, 1, 16, 4096), "i8+rowscale+kv_heads=1"),
    ],
)
def test_its_adversarial_cases_fit_fp16_at_a_deep_k(name, shape, layout):
    # With half of x's entries ones, silu(gate) * up (and a sum times a row scale of 64) passed
    # fp16's 65,504 from K of about 1,024: the case's reference was Inf in fp16 and every
    # kernel, the baseline too, failed it.
    op = all_ops()[name]
    problem = Problem(name, shape, "fp16", layout)
    out = torch.empty(op.output_spec(problem).shape, dtype=torch.float16)
    for case, inputs in op.adversarial_inputs(problem, seed=0, device="cpu").items():
        ref = op.reference(problem, *inputs)
        assert ref.abs().max() <= torch.finfo(torch.float16).max, case
        result = op.baseline_output(problem, *inputs, out=out)
        assert compare(result, ref, op.tolerance(problem)).passed, case
    # The 0/1 rows still reach the last K tile: a kernel that skips it fails the case.
    x = op.adversarial_inputs(problem, seed=0, device="cpu")["zero_one"][0]
    assert x[:, -64:].sum() > 0 and x[:, :64].sum() > 0
