"""matmul_splitk_tma's one-kernel fixup: right sums twice in a row, counters back at zero."""

import torch

from kernels import get_op
from kernels.candidate import load_module
from kernels.checking import compare
from kernels.problem import Problem


def test_split_k_fixup_is_correct_twice_and_rearms():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    op = get_op("matmul")
    family = next(f for f in op.families() if f.name == "matmul_splitk_tma")
    problem = Problem("matmul", (40, 64, 512), "fp16", "NN+bias+relu")
    params = {
        **family.default(problem),
        "BLOCK_M": 16,
        "BLOCK_N": 32,
        "BLOCK_K": 64,
        "SPLIT_K": 3,
        "NUM_STAGES": 2,
    }
    assert family.check(problem, params) is None
    module = load_module(family.render(problem, params))
    inputs = op.make_inputs(problem, seed=3, device=device)
    ref = op.reference(problem, *inputs)
    for _ in range(2):  # a counter left non-zero would make the second call skip the output
        out = torch.full((40, 64), float("nan"), dtype=torch.float16, device=device)
        module.run(*inputs, out=out)
        assert compare(out, ref, op.tolerance(problem)).passed
    ((_, counters),) = module._BUFFERS.values()
    assert int(counters.abs().sum()) == 0
