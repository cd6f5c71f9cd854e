"""Every op's starting points name its own families and are valid points for their problem."""

import pytest

from kernels import all_ops, parse_problem
from kernels.ops.matmul.starting_points import shape_class
from kernels.problem import Op
from kernels.shapes import public_problems

# The ops with measured starting points; the others (attention, swiglu) start at defaults,
# swiglu_gate and qkv_rotary at their dual-GEMM grid (not measured yet).
COVERED = {"matmul", "rmsnorm", "layernorm", "softmax", "cross_entropy", "sum", "rotary"}

# Representative problems of every shape class the starting points distinguish, plus the
# public set (the shapes the points were measured on).
REPRESENTATIVE = [
    ("matmul", "4096x4096x4096", "bf16", "NN"),  # large
    ("matmul", "1024x1024x8192", "bf16", "NN"),  # deep_k
    ("matmul", "1x4096x4096", "bf16", "NT"),  # decode
    ("matmul", "128x128x128", "fp16", "NN"),  # tiny
    ("matmul", "512x384x256", "bf16", "TN+bias+gelu"),  # small
    ("rmsnorm", "8192x4096", "bf16", ""),
    ("layernorm", "8192x8192", "bf16", ""),
    ("softmax", "37x1000", "fp16", ""),
    ("cross_entropy", "4096x128256", "bf16", ""),
    ("sum", "8192x8192", "bf16", ""),
    ("rotary", "4096x32x128", "bf16", ""),
]


def _problems():
    problems = [parse_problem(*spec) for spec in REPRESENTATIVE]
    return problems + [entry.problem for entry in public_problems()]


@pytest.mark.parametrize("problem", _problems(), ids=lambda p: p.key)
def test_every_starting_point_names_a_family_of_its_op_and_passes_its_check(problem):
    op = all_ops()[problem.op]
    families = {f.name: f for f in op.families()}
    points = op.starting_points(problem)
    assert points or problem.op not in COVERED, f"{problem.key} has no starting points"
    for name, partial in points:
        assert name in families, f"{name!r} is not a family of {problem.op}"
        family = families[name]
        params = {**family.default(problem), **partial}
        assert family.check(problem, params) is None, (name, partial)


def test_matmul_and_the_memory_bound_ops_implement_the_hook_and_the_base_has_none():
    ops = all_ops()
    assert all(type(ops[name]).starting_points is not Op.starting_points for name in COVERED)
    swiglu = parse_problem("swiglu", "64x128x256", "fp16")
    assert ops["swiglu"].starting_points(swiglu) == []  # the base class's default


def test_matmul_starts_each_shape_class_from_the_family_that_led_it():
    first = {
        spec[1]: all_ops()["matmul"].starting_points(parse_problem(*spec))[0][0]
        for spec in REPRESENTATIVE
        if spec[0] == "matmul"
    }
    assert first == {
        "4096x4096x4096": "matmul_cutlass_sm90",
        "1024x1024x8192": "matmul_cutlass_sm90",
        "1x4096x4096": "matmul_weight_stream",
        "128x128x128": "matmul_tiled",
        "512x384x256": "matmul_tiled",
    }
    assert [shape_class(parse_problem(*spec)) for spec in REPRESENTATIVE[:5]] == [
        "large",
        "deep_k",
        "decode",
        "tiny",
        "small",
    ]


def test_a_row_wise_op_puts_the_leader_of_the_nearest_measured_width_first():
    op = all_ops()["cross_entropy"]
    narrow = op.starting_points(parse_problem("cross_entropy", "4096x8192", "bf16"))
    wide = op.starting_points(parse_problem("cross_entropy", "4096x128256", "bf16"))
    assert narrow[0][1]["MODE"] == "one_pass" and wide[0][1]["MODE"] == "two_pass"
    assert len(narrow) == len({str(sorted(p.items())) for _, p in narrow}), "no duplicates"


def test_cutlass_points_lead_where_measured_and_stay_out_where_they_cannot_serve():
    op = all_ops()["matmul"]

    def families(spec):
        return [name for name, _ in op.starting_points(parse_problem(*spec))]

    # Large and deep-K bf16 shapes start from CUTLASS; the Triton leaders follow.
    large = families(("matmul", "2048x14336x4096", "bf16", "NN"))
    assert large[0] == "matmul_cutlass_sm90" and "matmul_persistent_tma" in large
    deep = families(("matmul", "4096x3584x18944", "bf16", "NN"))
    assert deep[0] == "matmul_cutlass_sm90" and "matmul_splitk_tma" in deep
    # Small M against a deep K: batched split-K first.
    small_m = op.starting_points(parse_problem("matmul", "128x1536x7168", "bf16", "NN"))
    assert small_m[0][1]["SCHEDULER"] == "batched_splitk"
    # Decode (the weight-streaming families'), tiny, short K and rows TMA cannot take: none.
    for spec in [
        ("matmul", "16x4096x4096", "bf16", "NN"),
        ("matmul", "128x128x128", "bf16", "NN"),
        ("matmul", "512x384x256", "bf16", "TN+bias+gelu"),
        ("matmul", "1024x50257x768", "bf16", "NN"),
    ]:
        assert "matmul_cutlass_sm90" not in families(spec), spec
