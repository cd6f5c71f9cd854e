"""Which GPUs this machine has, read from `nvidia-smi -L` (never by initialising CUDA here).

The Celery processes must not touch CUDA before they fork (RELIABILITY.md R4.1), so `up`
asks the driver's command-line tool instead of torch.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?$")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str  # as the driver reports it, e.g. "NVIDIA H100 80GB HBM3"

    @property
    def sku(self) -> str:
        """Short model name used in queue names: "h100", "a100", "rtx4090", "l4"."""
        words = self.name.replace("NVIDIA", "").replace("GeForce", "").replace("-", " ").split()
        picked: list[str] = []
        for word in words:
            picked.append(word.lower())
            if any(ch.isdigit() for ch in word):
                break
        return "".join(picked) or "gpu"

    @property
    def queue(self) -> str:
        return f"gpu.{self.sku}"


def parse_nvidia_smi_list(text: str) -> list[Gpu]:
    gpus = []
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if match:
            gpus.append(Gpu(index=int(match.group(1)), name=match.group(2).strip()))
    return gpus


def visible(gpus: list[Gpu], cuda_visible_devices: str | None) -> list[Gpu]:
    """Apply CUDA_VISIBLE_DEVICES when it lists indexes (unset means all; empty means none)."""
    if cuda_visible_devices is None:
        return gpus
    wanted = [part.strip() for part in cuda_visible_devices.split(",") if part.strip()]
    if not all(part.isdigit() for part in wanted):
        return gpus  # UUIDs or MIG ids: leave the choice to the driver
    indexes = {int(part) for part in wanted}
    return [gpu for gpu in gpus if gpu.index in indexes]


def detect_gpus(cuda_visible_devices: str | None = None) -> list[Gpu]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, "-L"], capture_output=True, text=True, timeout=20, check=True
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return visible(parse_nvidia_smi_list(out), cuda_visible_devices)
