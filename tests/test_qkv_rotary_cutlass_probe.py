"""The q/k/v CUTLASS probe's host half: GPT-J's rotary in CUTLASS's TMA-store epilogue (an EVT
leaf, KF_EPILOGUE 1) building for sm_90a wherever nvcc is (this CPU box has one; no GPU runs it
here), with the flags the probe says."""

import shutil

import pytest

from benchmarks import qkv_rotary_cutlass_probe as probe


def test_each_config_asks_nvcc_for_its_tile_schedule_and_epilogue(tmp_path):
    pytest.importorskip("cutlass_library")
    command = probe.nvcc_command("t128x128_c2x1_ping_tma", tmp_path / "a.cu", tmp_path / "a.so")
    flags = {f for f in command if f.startswith("-DKF_")}
    assert {"-DKF_TILE_M=128", "-DKF_TILE_N=128", "-DKF_SCHEDULE=1", "-DKF_EPILOGUE=1"} <= flags
    assert {"-DKF_ROPE=1", "-DKF_HEAD_DIM=256", "-DKF_ROTARY_DIM=64"} <= flags
    default = probe.nvcc_command("t128x256_c2x1_coop", tmp_path / "a.cu", tmp_path / "a.so")
    assert "-DKF_EPILOGUE=0" in default


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_the_tma_epilogue_builds_for_sm90a(tmp_path):
    pytest.importorskip("cutlass_library")
    name = "t128x256_c2x1_coop_tma"
    built = probe.build(tmp_path, probe.SOURCE, "current", 1, [name])
    assert built[f"current_{name}"]["ok"], built[f"current_{name}"]["log"]
    assert (tmp_path / f"current_{name}.so").stat().st_size > 100_000
