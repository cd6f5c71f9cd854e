"""The q/k/v CUTLASS probe's host half: GPT-J's rotary in CUTLASS's TMA-store epilogue (an EVT
leaf, KF_EPILOGUE 1) building for sm_90a wherever nvcc is (this CPU box has one; no GPU runs it
here), with the flags the probe says."""

import shutil

import pytest

from benchmarks import cutlass_build_abi
from benchmarks import qkv_rotary_cutlass_probe as probe


def test_each_config_asks_nvcc_for_its_tile_schedule_and_epilogue(tmp_path):
    pytest.importorskip("cutlass_library")
    command = probe.nvcc_command("t128x128_c2x1_ping_tma", tmp_path / "a.cu", tmp_path / "a.so")
    flags = {f for f in command if f.startswith("-DKF_")}
    assert {"-DKF_TILE_M=128", "-DKF_TILE_N=128", "-DKF_SCHEDULE=1", "-DKF_EPILOGUE=1"} <= flags
    assert {"-DKF_ROPE=1", "-DKF_HEAD_DIM=256", "-DKF_ROTARY_DIM=64"} <= flags
    default = probe.nvcc_command("t128x256_c2x1_coop", tmp_path / "a.cu", tmp_path / "a.so")
    assert "-DKF_EPILOGUE=0" in default


def test_the_plain_gemm_is_matmul_cutlass_at_the_same_tile_with_nothing_added(tmp_path):
    pytest.importorskip("cutlass_library")
    command = probe.plain_nvcc_command("t128x256_c2x1_coop", tmp_path / "p.so")
    flags = {f for f in command if f.startswith("-DKF_")}
    assert {"-DKF_TILE_M=128", "-DKF_TILE_N=256", "-DKF_CLUSTER_M=2", "-DKF_SCHEDULE=0"} <= flags
    assert {"-DKF_A_K_MAJOR=1", "-DKF_B_K_MAJOR=1", "-DKF_BIAS=0", "-DKF_RES=0"} <= flags
    assert not [f for f in flags if f.split("=")[0] in ("-DKF_ROPE", "-DKF_EPILOGUE")]
    assert command[-3:] == [str(cutlass_build_abi.PLAIN_SOURCE), "-o", str(tmp_path / "p.so")]
    assert cutlass_build_abi.PLAIN_SOURCE.is_file()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_tma_epilogue_builds_for_sm90a(tmp_path):
    pytest.importorskip("cutlass_library")
    name = "t128x256_c2x1_coop_tma"
    built = probe.build_family(tmp_path, probe.SOURCE, "current", 1, [name])
    assert built[f"current_{name}"]["ok"], built[f"current_{name}"]["log"]
    assert (tmp_path / f"current_{name}.so").stat().st_size > 100_000


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_plain_gemm_builds_for_sm90a(tmp_path):
    pytest.importorskip("cutlass_library")
    config = probe.PLAIN_CONFIGS[0]
    built = probe.build(tmp_path, "plain", 1, [config], probe.plain_nvcc_command)
    assert built[f"plain_{config}"]["ok"], built[f"plain_{config}"]["log"]
