"""matmul_weight_stream: the split plan, the deterministic split-K reduction, both forms.

On the CPU these run in the Triton interpreter (fp16; the plan sees 4 "SMs" there, so small
problems take the split path); on a GPU they run natively, and the bf16 cases run too.
"""

import pytest
import torch

from kernels import get_op
from kernels.candidate import load_module
from kernels.checking import check_source, compare
from kernels.problem import Problem

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
OP = get_op("matmul")
FAMILY = next(f for f in OP.families() if f.name == "matmul_weight_stream")


def module_for(problem, **params):
    params = {**FAMILY.default(problem), **params}
    assert FAMILY.check(problem, params) is None, FAMILY.check(problem, params)
    return load_module(FAMILY.render(problem, params))


def test_split_reduction_is_correct_twice_and_rearms():
    problem = Problem("matmul", (40, 64, 512), "fp16", "NN+bias+relu")
    module = module_for(problem, BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, SPLIT_K=3, NUM_STAGES=2)
    inputs = OP.make_inputs(problem, seed=3, device=DEVICE)
    ref = OP.reference(problem, *inputs)
    for _ in range(2):  # a counter left non-zero would make the second call skip the output
        out = torch.full((40, 64), float("nan"), dtype=torch.float16, device=DEVICE)
        module.run(*inputs, out=out)
        assert compare(out, ref, OP.tolerance(problem)).passed
    ((_, counters),) = module._BUFFERS.values()
    assert int(counters.abs().sum()) == 0
    assert module._PLANS[(str(inputs[0].device), 40, 64, 512)] == (3, 3)  # 8 K tiles: 3+3+2


def test_the_auto_split_sums_in_a_fixed_order_so_repeated_calls_are_bit_identical():
    problem = Problem("matmul", (3, 48, 1024), "fp16", "NT")
    module = module_for(problem, BLOCK_N=32, BLOCK_K=32, NUM_STAGES=2)
    inputs = OP.make_inputs(problem, seed=5, device=DEVICE)
    outs = []
    for _ in range(3):
        out = torch.full((3, 48), float("nan"), dtype=torch.float16, device=DEVICE)
        module.run(*inputs, out=out)
        outs.append(out)
    splits, _ = next(iter(module._PLANS.values()))
    assert splits > 1, "the plan must split K here, or this test exercises nothing"
    assert compare(outs[0], OP.reference(problem, *inputs), OP.tolerance(problem)).passed
    assert all(torch.equal(outs[0], o) for o in outs[1:])


REGISTERS = {"LOADS": "registers", "NUM_STAGES": 1}


@pytest.mark.parametrize("loads", [{}, REGISTERS], ids=["async", "registers"])
@pytest.mark.parametrize(
    ("shape", "layout"), [((1, 40, 300), "TN+bias+gelu"), ((3, 33, 70), "NT+bias+silu")]
)
def test_the_fma_form_is_correct_for_one_row_and_for_several(shape, layout, loads):
    problem = Problem("matmul", shape, "fp16", layout)
    params = {"BLOCK_M": 1, "BLOCK_N": 32, "BLOCK_K": 32, "MMA": "fma", "SPLIT_K": 2, **loads}
    params = {**FAMILY.default(problem), **params}
    assert not check_source(OP, problem, FAMILY.render(problem, params), device=DEVICE)


@pytest.mark.parametrize("split", [1, 3, "auto"])
@pytest.mark.parametrize(
    ("shape", "layout"), [((5, 40, 300), "NN+bias+relu"), ((17, 33, 32), "TN"), ((2, 9, 7), "NT")]
)
def test_register_prefetch_is_correct_at_every_k_range(shape, layout, split):
    """Prefetching two tiles ahead must load nothing past a split's range or K (one-tile and
    sub-tile K included)."""
    problem = Problem("matmul", shape, "fp16", layout)
    params = {**FAMILY.default(problem), "BLOCK_N": 32, "BLOCK_K": 32, "SPLIT_K": split}
    params.update(REGISTERS)
    assert not check_source(OP, problem, FAMILY.render(problem, params), device=DEVICE)


def test_check_keeps_each_form_to_its_block_m():
    problem = Problem("matmul", (1, 4096, 4096), "bf16", "NN")
    base = FAMILY.default(problem)
    assert FAMILY.check(problem, {**base, "MMA": "fma"}) is not None  # BLOCK_M 16
    assert FAMILY.check(problem, {**base, "BLOCK_M": 1}) is not None  # tl.dot needs 16
    assert FAMILY.check(problem, {**base, "BLOCK_M": 1, "MMA": "fma", "BLOCK_K": 32}) is None
    assert FAMILY.check(problem, {**base, "LOADS": "registers"}) is not None  # NUM_STAGES 4
    assert "registers per thread" in FAMILY.check(problem, {**base, **REGISTERS})
    assert FAMILY.check(problem, {**base, **REGISTERS, "NUM_WARPS": 8}) is None
    too_much_smem = {**base, "BLOCK_N": 256, "BLOCK_K": 256, "NUM_STAGES": 6}
    assert "shared memory" in FAMILY.check(problem, too_much_smem)


def test_defaults_are_valid_for_every_m():
    for m in (1, 7, 16, 17, 32, 33, 64, 65, 4096):
        problem = Problem("matmul", (m, 4096, 4096), "bf16", "NN")
        assert FAMILY.check(problem, FAMILY.default(problem)) is None, m


def plan_module():
    problem = Problem("matmul", (1, 6144, 4096), "bf16", "NN")
    return module_for(problem, BLOCK_N=64, BLOCK_K=128, NUM_STAGES=4)


@pytest.mark.parametrize(
    ("tiles", "k_tiles"), [(96, 32), (64, 112), (2004, 32), (1, 1), (5, 300), (448, 32)]
)
def test_the_split_plan_covers_k_exactly_once(tiles, k_tiles):
    splits, per = plan_module().split_plan(tiles, k_tiles, slots=264, rows=1, elt=2)
    assert 1 <= splits <= k_tiles
    assert (splits - 1) * per < k_tiles <= splits * per  # every split has work, none is missing


def test_the_split_plan_splits_few_deep_tiles_and_leaves_many_tiles_whole():
    module = plan_module()
    few, _ = module.split_plan(tiles=64, k_tiles=112, slots=264, rows=4, elt=2)
    many, _ = module.split_plan(tiles=2004, k_tiles=32, slots=264, rows=1, elt=2)
    assert few > 1  # 64 programs cannot keep enough bytes in flight on 132 SMs
    assert many == 1  # 2004 tiles already fill the GPU many times over


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="bf16 is checked on the GPU (the interpreter's is wrong)")
@pytest.mark.parametrize("layout", ["NN", "NT", "TN+bias+gelu", "NN+bias+silu"])
@pytest.mark.parametrize(
    "shape", [(1, 4096, 4099), (3, 4095, 1000), (17, 33, 65), (64, 1000, 4096), (70, 256, 512)]
)
def test_bf16_on_the_gpu_at_odd_shapes(shape, layout):
    problem = Problem("matmul", shape, "bf16", layout)
    base = FAMILY.default(problem)
    registers = {**base, **REGISTERS, "SPLIT_K": 2, "BLOCK_K": 64, "NUM_WARPS": 8}
    for params in [base, {**base, "SPLIT_K": 3}, registers]:
        assert FAMILY.check(problem, params) is None
        source = FAMILY.render(problem, params)
        for seed in (0, 1):
            assert not check_source(OP, problem, source, seed=seed, device="cuda")
