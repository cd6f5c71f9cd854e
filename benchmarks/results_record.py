"""What every benchmarks/results/ entry a device script writes starts with: when it ran (UTC),
the machine's device and library versions, the command that made it and the timing protocol."""

from __future__ import annotations

import datetime
import json
import platform
import shlex
import subprocess
from pathlib import Path
from typing import Any

from harness.config import TIMING_PROTOCOL


def versions() -> dict[str, str]:
    """Device, driver and library versions of this machine (nvidia-smi, not a CUDA context:
    a model only ever runs in the sandboxed children)."""
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = "absent"
    info["cuda"] = str(torch.version.cuda)
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        name, driver = (part.strip() for part in smi.stdout.splitlines()[0].split(",", 1))
        info |= {"device": name, "driver": driver}
    except (OSError, IndexError, ValueError, subprocess.SubprocessError):
        info |= {"device": "cpu", "driver": "none"}
    return info


def made(module: str, argv: list[str]) -> dict[str, Any]:
    """{date, command} for a run of `python3 -m module argv...`: what an entry computed from
    other entries (a standing) records, whose device and versions are its sources'."""
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": f"python3 -m {module} " + shlex.join(argv),
    }


def stamp(module: str, argv: list[str]) -> dict[str, Any]:
    """{date, command, versions, timing_protocol} for a run on this machine: the protocol's
    version says which L2 flush its times were taken after (harness/config.py)."""
    return made(module, argv) | {"versions": versions(), "timing_protocol": TIMING_PROTOCOL}


def write(record: dict[str, Any], out: str | None) -> None:
    """The entry as indented JSON at `out` (nothing when no --out was given)."""
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(record, indent=1) + "\n")
