"""The SwiGLU CUTLASS probe's host half: the weight interleave its epilogue relies on, and the
kernel source building for sm_90a wherever nvcc is (this CPU box has one; no GPU runs it here)."""

import shutil

import pytest
import torch

from benchmarks import cutlass_build_abi
from benchmarks import swiglu_cutlass_probe as probe


@pytest.mark.parametrize("group", [1, 8])
def test_the_interleave_puts_each_group_of_gates_before_the_same_rows_of_up(group):
    n, k = 32, 3
    w_gate = torch.arange(n * k, dtype=torch.float32).reshape(n, k)
    w_up = -w_gate - 1
    w = probe.interleave(w_gate, w_up, group)
    assert w.shape == (2 * n, k)
    for row in range(2 * n):
        block, within = divmod(row, 2 * group)
        source = w_gate if within < group else w_up
        assert torch.equal(w[row], source[block * group + within % group])
    # What the epilogue computes from it is what the op means.
    x = torch.randn(5, k)
    acc = x @ w.T
    gate_cols = [c for c in range(2 * n) if c % (2 * group) < group]
    gated = torch.nn.functional.silu(acc[:, gate_cols]) * acc[:, [c + group for c in gate_cols]]
    torch.testing.assert_close(gated, torch.nn.functional.silu(x @ w_gate.T) * (x @ w_up.T))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_grouped_epilogues_build_for_sm90a(tmp_path):
    pytest.importorskip("cutlass_library")
    names = ["g8_t128x256x64_c2x1_coop", "g8q_t64x256x64_c1x1_ping"]
    built = probe.build(tmp_path, jobs=2, names=names)
    for name in names:
        assert built[name]["ok"], built[name]["log"]
        assert (tmp_path / f"{name}.so").stat().st_size > 100_000


def test_a_plain_config_is_matmul_cutlass_over_2n_and_a_gated_one_the_swiglu_source(tmp_path):
    pytest.importorskip("cutlass_library")
    plain = probe.nvcc_command("plain_t256x128x64_c1x2_coop", tmp_path / "s.cu", tmp_path / "p.so")
    flags = {f for f in plain if f.startswith("-DKF_")}
    assert {"-DKF_TILE_M=256", "-DKF_TILE_N=128", "-DKF_CLUSTER_N=2", "-DKF_BIAS=0"} <= flags
    assert plain[-3] == str(cutlass_build_abi.PLAIN_SOURCE) and "-DKF_STORE=0" not in flags
    gated = probe.nvcc_command("g8q_t128x256x64_c2x1_coop", tmp_path / "s.cu", tmp_path / "g.so")
    assert {"-DKF_STORE=1", "-DKF_CLUSTER_M=2", "-DKF_SCHEDULE=0"} <= set(gated)
    assert gated[-3:] == [str(tmp_path / "s.cu"), "-o", str(tmp_path / "g.so")]
