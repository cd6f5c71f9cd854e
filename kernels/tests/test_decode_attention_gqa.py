"""decode_attention with fewer cached heads than query heads (grouped-query attention): the
layout names them, the reference and baseline repeat them, the kernel reads each once."""

import pytest
import torch

from kernels import all_ops
from kernels.candidate import load_module
from kernels.checking import check_source, compare
from kernels.problem import Problem, ProblemError

OP = all_ops()["decode_attention"]
FAMILY = OP.families()[0]


def gqa(shape=(2, 6, 3, 24, 16), kv=2, dtype="fp16") -> Problem:
    return Problem("decode_attention", shape, dtype, f"kv_heads={kv}")


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("kv=2", "kv_heads=<n>"),
        ("kv_heads=02", "kv_heads=<n>"),
        ("kv_heads=x", "kv_heads=<n>"),
        ("kv_heads=4", "must divide H"),
        ("kv_heads=6", "write no layout"),
        ("kv_heads=0", "must divide H"),
    ],
)
def test_a_bad_kv_heads_layout_says_what_to_write(layout, message):
    with pytest.raises(ProblemError, match=message):
        OP.validate(Problem("decode_attention", (2, 6, 3, 24, 16), "fp16", layout))


def test_the_cached_heads_are_the_layouts_and_each_serves_its_group():
    problem = gqa()
    OP.validate(problem)
    q, k, v = OP.make_inputs(problem, seed=0, device="cpu")
    assert q.shape == (2, 6, 3, 16) and k.shape == v.shape == (2, 2, 24, 16)
    # The same attention as multi-head attention over the cache repeated per query head.
    mha = Problem("decode_attention", problem.shape, "fp16")
    repeated = k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1)
    assert torch.equal(OP.reference(problem, q, k, v), OP.reference(mha, q, *repeated))
    out = torch.empty(OP.output_spec(problem).shape, dtype=q.dtype)
    out = OP.baseline_output(problem, q, k, v, out=out)
    assert compare(out, OP.reference(problem, q, k, v), OP.tolerance(problem)).passed
    # Every smaller shape of the sweep keeps the grouping.
    assert all(p.layout == problem.layout and p.shape[1] == 6 for p in OP.sweep(problem))


@pytest.mark.parametrize(("shape", "kv"), [((2, 6, 3, 24, 16), 2), ((1, 4, 1, 40, 16), 1)])
def test_the_split_kernel_is_correct_for_grouped_heads_in_the_interpreter(shape, kv):
    problem = gqa(shape, kv)
    for params in (
        FAMILY.default(problem),
        {"BLOCK_S": 16, "PROGRAMS_PER_SM": 4, "NUM_WARPS": 2, "NUM_STAGES": 1},
    ):
        assert not check_source(OP, problem, FAMILY.render(problem, params)), params


def test_a_kernel_that_reads_the_wrong_cached_head_is_caught():
    problem = gqa()
    source = FAMILY.render(problem, FAMILY.default(problem))
    wrong = source.replace("heads = kv * group + offs_r // T", "heads = kv + offs_r // T")
    assert wrong != source
    assert check_source(OP, problem, wrong)


def test_grouped_heads_read_from_strided_cache_slices():
    problem = gqa((1, 4, 2, 20, 16), kv=2)
    q, k, v = OP.make_inputs(problem, seed=0, device="cpu")
    cache_k = torch.zeros(1, 2, 32, 16, dtype=k.dtype)
    cache_v = torch.zeros(1, 2, 32, 16, dtype=v.dtype)
    cache_k[:, :, :20], cache_v[:, :, :20] = k, v
    out = torch.empty(1, 4, 2, 16, dtype=q.dtype)
    module = load_module(FAMILY.render(problem, FAMILY.default(problem)))
    module.run(q, cache_k[:, :, :20], cache_v[:, :, :20], out=out)
    assert compare(out, OP.reference(problem, q, k, v), OP.tolerance(problem)).passed


def test_a_group_too_large_for_the_registers_is_refused_at_few_warps():
    problem = gqa((1, 28, 16, 4096, 128), kv=4)  # Qwen2-7B: 7 query heads a cached head
    point = {"BLOCK_S": 64, "PROGRAMS_PER_SM": 2, "NUM_WARPS": 4, "NUM_STAGES": 2}
    assert "registers" in FAMILY.check(problem, point)
    assert FAMILY.check(problem, {**point, "NUM_WARPS": 8}) is None
    assert FAMILY.starting_points(problem), "some point must fit"
