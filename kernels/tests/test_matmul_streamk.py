"""matmul_streamk_tma: the stream-K split, its partial tiles and fixups, and re-armed counters.

The interpreter has no SMs, so each case forces a small program count (SM_COUNT_OVERRIDE) and
asserts, from the module's own split, that the shape really has the situation it is meant to
exercise (tiles shared by 2 to 4 programs, whole stream-K tiles stored directly, no stream-K).
The interpreter runs programs one after another, so there the highest contributor always
arrives last; one test presets the counters to make the lowest one last instead (SK_PEEK's
skipped store included). Other interleavings happen only on a GPU (bf16 cases run there).
"""

import pytest
import torch

from kernels import get_op
from kernels.candidate import load_module
from kernels.checking import compare
from kernels.problem import Problem

GPU = torch.cuda.is_available()
DEVICE = "cuda" if GPU else "cpu"
OP = get_op("matmul")
FAMILY = next(f for f in OP.families() if f.name == "matmul_streamk_tma")
SMALL_TILES = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "NUM_STAGES": 2}


def shares(split) -> list[tuple[int, int]]:
    """Each stream-K program's [first, end) iterations, recomputed from the split's counts."""
    out, start = [], 0
    for p in range(split.sk_programs):
        size = split.sk_base + (1 if p < split.sk_extra else 0)
        out.append((start, start + size))
        start += size
    return out


def contributors(split) -> list[int]:
    """How many programs add to each stream-K tile (1: stored directly, no fixup)."""
    k = split.k_tiles
    return [
        sum(1 for first, end in shares(split) if first < (t + 1) * k and end > t * k)
        for t in range(split.sk_tiles)
    ]


def render(problem, programs, **overrides):
    params = {**FAMILY.default(problem), **SMALL_TILES, **overrides}
    assert FAMILY.check(problem, params) is None
    module = load_module(FAMILY.render(problem, params))
    module.SM_COUNT_OVERRIDE = programs
    return module


# (shape, layout, programs, overrides, contributors per stream-K tile)
CASES = {
    # 9 tiles on 5 programs: 4 stream-K tiles, each shared by 2 programs; odd M.
    "pairs": ((130, 192, 256), "NN", 5, {}, [2, 2, 2, 2]),
    # One tile, 8 K-iterations over 3 programs: 3 partials, summed in program order.
    "three_way": ((64, 64, 256), "TN+bias+gelu", 3, {"SK_FIRST": False}, [3]),
    # SK_WAVES=2 on 3 programs: 5 stream-K tiles, three of them whole (stored directly);
    # every partial goes through memory (no SK_PEEK).
    "whole_tiles": (
        (200, 320, 96),
        "NT",
        3,
        {"SK_WAVES": 2, "DESCRIPTORS": "device", "EPILOGUE_SUBTILE": True, "SK_PEEK": False},
        [1, 2, 1, 2, 1],
    ),
    # Powers of two: 16 tiles on 5 programs, the last tile's 8 iterations over 4 programs
    # (a share is at least a quarter of a tile).
    "pow2_tail": ((256, 256, 512), "NN+bias+relu", 5, {"GROUP": 4, "BLOCK_K": 64}, [4]),
    # 16 tiles on 4 programs: whole waves only, no stream-K part at all.
    "no_stream_k": ((256, 256, 160), "TN", 4, {"TILE_ORDER": "n_major"}, []),
}


# The interpreter computes bf16 wrongly (kernels/README.md); fp32 is not one of matmul's
# dtypes and tl.dot runs it as tf32 on a GPU, so it only checks the indexing on the CPU.
DTYPES = [
    pytest.param("fp16"),
    pytest.param("fp32", marks=pytest.mark.skipif(GPU, reason="tf32 on the GPU")),
    pytest.param("bf16", marks=pytest.mark.skipif(not GPU, reason="interpreter bf16")),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_stream_k_is_correct_twice_in_a_row_and_rearms_its_counters(case, dtype):
    shape, layout, programs, overrides, expected = CASES[case]
    problem = Problem("matmul", shape, dtype, layout)
    module = render(problem, programs, **overrides)
    split = module.stream_k_split(*shape, programs)
    assert contributors(split) == expected, split
    assert split.dp_tiles + split.sk_tiles == split.tiles
    inputs = OP.make_inputs(problem, seed=5, device=DEVICE)
    ref = OP.reference(problem, *inputs)
    for _ in range(2):  # a counter left non-zero would make the second call skip a tile
        out = torch.full(shape[:2], float("nan"), dtype=problem.torch_dtype, device=DEVICE)
        module.run(*inputs, out=out)
        result = compare(out, ref, OP.tolerance(problem))
        assert result.passed, f"{case}: worst {result.worst_error:.3g} {result.detail}"
    ((_, counters),) = module._BUFFERS.values()
    assert int(counters.abs().sum()) == 0


@pytest.mark.parametrize("case", ["pairs", "three_way", "whole_tiles", "pow2_tail"])
def test_the_first_contributor_arriving_last_gets_the_same_bits(case):
    """The interpreter runs programs in order, so the highest contributor is always last. To
    make the lowest one last instead, a second call starts with every shared tile's counter
    at (contributors - 1): the lowest program then counts as the last arrival and sums the
    others' partials from the first call (the same inputs, so the same values). fp32 output
    on the CPU: fp16 rounding would hide a change of summation order."""
    shape, layout, programs, overrides, _ = CASES[case]
    problem = Problem("matmul", shape, "fp16" if GPU else "fp32", layout)
    module = render(problem, programs, **overrides)
    split = module.stream_k_split(*shape, programs)
    inputs = OP.make_inputs(problem, seed=7, device=DEVICE)
    first = torch.full(shape[:2], float("nan"), dtype=problem.torch_dtype, device=DEVICE)
    module.run(*inputs, out=first)
    ((_, counters),) = module._BUFFERS.values()
    for tile, count in enumerate(contributors(split)):
        counters[tile] = count - 1
    reversed_order = torch.full_like(first, float("nan"))
    module.run(*inputs, out=reversed_order)
    counters.zero_()  # the real last arrivals left their tiles at 1
    assert compare(first, OP.reference(problem, *inputs), OP.tolerance(problem)).passed
    assert torch.equal(first, reversed_order)


@pytest.mark.parametrize("case", ["pairs", "three_way"])  # the 2- and the 3-contributor sums
def test_a_fixup_that_drops_the_other_partials_is_caught(case):
    shape, layout, programs, overrides, _ = CASES[case]
    problem = Problem("matmul", shape, "fp16", layout)
    params = {**FAMILY.default(problem), **SMALL_TILES, **overrides}
    source = FAMILY.render(problem, params)
    assert source.count("+= tl.load(part_ptr") == 2  # add_partial's two half-width loads
    module = load_module(source.replace("+= tl.load(part_ptr", "+= 0.0 * tl.load(part_ptr"))
    module.SM_COUNT_OVERRIDE = programs
    inputs = OP.make_inputs(problem, seed=5, device=DEVICE)
    out = torch.empty(shape[:2], dtype=torch.float16, device=DEVICE)
    module.run(*inputs, out=out)
    assert not compare(out, OP.reference(problem, *inputs), OP.tolerance(problem)).passed


def test_the_h200_split_of_4096_cubed_shares_the_partial_wave_evenly():
    problem = Problem("matmul", (4096, 4096, 4096), "bf16", "NN")
    params = FAMILY.default(problem)
    assert (params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"]) == (128, 256, 64)
    module = load_module(FAMILY.render(problem, params))
    split = module.stream_k_split(4096, 4096, 4096, 132)
    # 512 tiles on 132 SMs: 3 whole waves, the other 116 tiles' 7424 K-iterations shared.
    assert (split.tiles, split.dp_tiles, split.sk_tiles) == (512, 396, 116)
    assert split.sk_programs == 132
    sizes = [end - first for first, end in shares(split)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 116 * 64
    assert set(contributors(split)) <= {2, 3}
    # Per SM: 3 tiles plus 56-57 iterations, against 4 whole tiles (256) for the busiest SM
    # of a persistent grid.
    assert 3 * 64 + max(sizes) == 249
    two_waves = load_module(FAMILY.render(problem, {**params, "SK_WAVES": 2}))
    assert two_waves.stream_k_split(4096, 4096, 4096, 132).sk_tiles == 116 + 132


SPLIT_SHAPES = [
    (1, 1, 1),
    (128, 256, 64),
    (1000, 3000, 100),
    (4096, 11008, 4096),
    (8192, 1024, 1024),
    (2048, 2048, 2048),
    (300, 5000, 30000),
]


@pytest.mark.parametrize("waves", [1, 2])
def test_the_split_shares_every_stream_k_iteration_once_for_any_shape(waves):
    problem = Problem("matmul", (4096, 4096, 4096), "bf16", "NN")
    module = load_module(FAMILY.render(problem, {**FAMILY.default(problem), "SK_WAVES": waves}))
    for programs in (1, 2, 3, 7, 132):
        for m, n, k in SPLIT_SHAPES:
            split = module.stream_k_split(m, n, k, programs)
            assert split.dp_tiles % programs == 0  # whole waves only
            assert split.sk_tiles < 2 * programs  # the counters and slots buffers() keeps
            assert split.sk_programs <= programs
            sizes = [end - first for first, end in shares(split)]
            assert sum(sizes) == split.sk_tiles * split.k_tiles
            assert not sizes or (min(sizes) >= 1 and max(sizes) - min(sizes) <= 1)
            assert max(contributors(split), default=0) <= module.MAX_SHARES_PER_TILE + 1


def test_its_check_rejects_what_the_persistent_family_rejects():
    problem = Problem("matmul", (4096, 4096, 4096), "bf16", "NN")
    base = FAMILY.default(problem)
    assert FAMILY.check(problem, {**base, "WARP_SPECIALIZE": True, "NUM_WARPS": 4})
    assert FAMILY.check(problem, {**base, "FLATTEN": True, "WARP_SPECIALIZE": False})
    assert "shared memory" in FAMILY.check(
        problem, {**base, "BLOCK_M": 256, "BLOCK_K": 128, "NUM_STAGES": 5}
    )
    assert FAMILY.check(problem, {**base, "WARP_SPECIALIZE": True, "FLATTEN": True}) is None
