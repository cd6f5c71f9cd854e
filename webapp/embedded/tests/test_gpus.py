"""`up` reads GPUs from `nvidia-smi -L` and names one queue per GPU model."""

from webapp.embedded.gpus import parse_nvidia_smi_list, visible

SMI = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-8c1e2f4a-0000-0000-0000-000000000000)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-8c1e2f4a-0000-0000-0000-000000000001)
GPU 2: NVIDIA A100-SXM4-80GB (UUID: GPU-1)
GPU 3: NVIDIA GeForce RTX 4090 (UUID: GPU-2)
  MIG 1g.10gb     Device  0: (UUID: MIG-x)
"""


def test_it_reads_each_gpu_and_its_queue():
    gpus = parse_nvidia_smi_list(SMI)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert [g.queue for g in gpus] == ["gpu.h100", "gpu.h100", "gpu.a100", "gpu.rtx4090"]


def test_it_honours_cuda_visible_devices():
    gpus = parse_nvidia_smi_list(SMI)
    assert [g.index for g in visible(gpus, "1,3")] == [1, 3]
    assert visible(gpus, "") == []
    assert visible(gpus, None) == gpus


def test_it_finds_no_gpu_in_empty_output():
    assert parse_nvidia_smi_list("") == []
