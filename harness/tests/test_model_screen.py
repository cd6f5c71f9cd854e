"""Screening our own families on a model's problems (the model job's cheap tier): in one
sandboxed child, each point checked against the reference and timed against PyTorch, the best
gated on the op's sweep. On the CPU the kernels run in Triton's interpreter (fp16)."""

from __future__ import annotations

from harness.model.screen import points, screen_problems
from kernels.problem import Problem


def test_points_start_from_the_ops_starting_points_and_are_valid():
    problem = Problem("swiglu_gate", (8, 11008, 4096), "bf16")
    found = points(problem, limit=3)
    assert len(found) == 3 and all(p["family"] == "swiglu_gate_dual" for p in found)
    assert found[0]["params"]["BLOCK_M"] == 16, "few rows: the weight-streaming points"
    assert len({str(p["params"]) for p in found}) == 3


def test_only_triton_families_are_screened_in_the_one_child():
    """The CUTLASS leaders of a large matmul are minute-long nvcc builds each: six of them
    would overrun the child's wall clock and fail the whole model's screen."""
    import kernels

    problem = kernels.parse_problem("matmul", "2048x4096x4096", "bf16", "NN")
    assert kernels.get_op("matmul").starting_points(problem)[0][0] == "matmul_cutlass_sm90"
    found = points(problem)
    backends = {f.name: f.backend for f in kernels.get_op("matmul").families()}
    assert len(found) == 6 and {backends[p["family"]] for p in found} == {"triton"}


def test_a_layout_no_triton_family_reads_has_no_points():
    """qkv_rotary's interleaved weight is the CUTLASS family's alone (the dual family's
    default has no point for it)."""
    problem = Problem("qkv_rotary", (2048, 16, 16, 64, 1024), "bf16", "i8+kv_heads=16")
    assert points(problem) == []
    assert points(Problem("qkv_rotary", problem.shape, "bf16")) != []


def test_it_screens_points_and_gates_the_best_on_the_sweep():
    problems = [
        Problem("swiglu_gate", (8, 64, 32), "fp16"),
        Problem("decode_attention", (1, 2, 3, 40, 16), "fp16"),
    ]
    results = screen_problems(problems, device="cpu", limit=2)
    assert [r.key for r in results] == [p.key for p in problems]
    for r in results:
        assert not r.error, r.error
        assert len(r.tried) == 2 and all("error" not in t for t in r.tried), r.tried
        assert r.family and r.source and r.gate == [], r.gate
        assert r.kernel_us > 0 and r.torch_us > 0 and r.speedup == r.torch_us / r.kernel_us
        assert r.won == (r.speedup > 1.0)
