"""attention (a prefill's or an encoder's) with fewer key/value heads than query heads: the
layout names them after the mask, the reference and baseline group them, the flash kernel
reads each key/value head for its query heads, never a repeated copy."""

import re

import pytest
import torch

from kernels import all_ops
from kernels.candidate import load_module
from kernels.checking import check_source, compare
from kernels.problem import Problem, ProblemError

OP = all_ops()["attention"]
FAMILY = OP.families()[0]


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("kv_heads=4+causal", "causal+kv_heads=<n>"),
        ("causal+", "causal+kv_heads=<n>"),
        ("kv_heads=02", "kv_heads=<n>"),
        ("causal+kv_heads=4", "must divide H"),
        ("causal+kv_heads=6", "write causal when"),
        ("kv_heads=6", "write no layout when"),
        ("kv_heads=0", "must divide H"),
    ],
)
def test_a_bad_layout_says_what_to_write(layout, message):
    with pytest.raises(ProblemError, match=re.escape(message)):
        OP.validate(Problem("attention", (2, 6, 24, 16), "fp16", layout))


@pytest.mark.parametrize("mask", ["", "causal+"])
def test_the_grouped_heads_are_the_layouts_and_each_serves_its_query_heads(mask):
    problem = Problem("attention", (2, 6, 24, 16), "fp16", f"{mask}kv_heads=2")
    OP.validate(problem)
    q, k, v = OP.make_inputs(problem, seed=0, device="cpu")
    assert q.shape == (2, 6, 24, 16) and k.shape == v.shape == (2, 2, 24, 16)
    # The same attention as multi-head attention over the heads repeated per query head.
    mha = Problem("attention", problem.shape, "fp16", mask.rstrip("+"))
    repeated = k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1)
    assert torch.equal(OP.reference(problem, q, k, v), OP.reference(mha, q, *repeated))
    out = torch.empty(OP.output_spec(problem).shape, dtype=q.dtype)
    out = OP.baseline_output(problem, q, k, v, out=out)
    assert compare(out, OP.reference(problem, q, k, v), OP.tolerance(problem)).passed
    # Every smaller shape of the sweep keeps the grouping.
    assert all(p.layout == problem.layout and p.shape[1] == 6 for p in OP.sweep(problem))


@pytest.mark.parametrize(
    ("shape", "layout"),
    [
        ((2, 6, 33, 16), "causal+kv_heads=2"),
        ((1, 4, 70, 24), "kv_heads=1"),  # multi-query; a head dim the kernel pads
        ((1, 2, 70, 64), "causal"),
        ((2, 3, 17, 32), ""),
    ],
)
def test_the_flash_kernel_is_correct_in_the_interpreter(shape, layout):
    problem = Problem("attention", shape, "fp16", layout)
    for params in (
        FAMILY.default(problem),
        {"BLOCK_M": 16, "BLOCK_N": 32, "NUM_WARPS": 4, "NUM_STAGES": 1},
        {"BLOCK_M": 32, "BLOCK_N": 16, "NUM_WARPS": 4, "NUM_STAGES": 2},
    ):
        assert not check_source(OP, problem, FAMILY.render(problem, params)), params


def test_a_kernel_that_pairs_a_query_head_with_the_wrong_key_head_is_caught():
    # The other repeat convention (query head h on key head h % HKV, as repeat() would
    # lay them out instead of repeat_interleave()).
    problem = Problem("attention", (1, 6, 24, 16), "fp16", "causal+kv_heads=2")
    source = FAMILY.render(problem, FAMILY.default(problem))
    wrong = source.replace("kv = h // GROUPS", "kv = h % (H // GROUPS)")
    assert wrong != source
    assert check_source(OP, problem, wrong)


def test_transposed_heads_are_read_as_they_lie():
    # A model's q/k/v are (B, S, H, D) views transposed to (B, H, S, D): not contiguous.
    problem = Problem("attention", (2, 4, 20, 16), "fp16", "causal+kv_heads=2")
    q, k, v = OP.make_inputs(problem, seed=0, device="cpu")
    views = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)]
    assert not any(t.is_contiguous() for t in views)
    out = torch.empty(OP.output_spec(problem).shape, dtype=q.dtype)
    load_module(FAMILY.render(problem, FAMILY.default(problem))).run(*views, out=out)
    assert compare(out, OP.reference(problem, q, k, v), OP.tolerance(problem)).passed


@pytest.mark.parametrize(
    ("shape", "layout"),
    [
        ((2, 28, 1024, 128), "causal+kv_heads=4"),  # Qwen2-7B prefill
        ((4, 16, 512, 256), "causal"),  # GPT-J-6B: heads of 256
        ((64, 12, 197, 64), ""),  # ViT-B/16
    ],
)
def test_the_example_models_attentions_have_starting_points_that_fit(shape, layout):
    problem = Problem("attention", shape, "bf16", layout)
    OP.validate(problem)
    starts = OP.starting_points(problem)
    assert len(starts) >= 3
    assert all(FAMILY.check(problem, {**FAMILY.default(problem), **p}) is None for _, p in starts)
