"""Which device evaluations run on, and its measured ceilings (cached on disk per device)."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shutil
from pathlib import Path

from harness.config import Limits
from harness.results import DeviceInfo


def cache_dir() -> Path:
    """Trusted, harness-owned cache (ceilings, cuBLASLt build, compile cache, profiles)."""
    root = os.environ.get("KF_CACHE_DIR") or os.path.join(Path.home(), ".cache", "kernelforge")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def gpu_visible() -> bool:
    """Without initialising CUDA (the parent may be a forking Celery worker)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    return os.path.exists("/dev/nvidiactl") and any(
        name.startswith("nvidia") and name[6:].isdigit() for name in os.listdir("/dev")
    )


def usable_cpus() -> int:
    """CPU cores this process may run on: its affinity mask, not the host's count, so a worker
    pinned to its GPU's share of a multi-GPU host (taskset, a container's cpuset) sizes its
    compile pools to that share."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


def interpreter_info() -> DeviceInfo:
    return DeviceInfo(
        name="cpu (triton interpreter)",
        kind="interpreter",
        torch=_version("torch"),
        triton=_version("triton"),
    )


@functools.cache
def device_ceilings(refresh: bool = False) -> DeviceInfo:
    """Measured once per device (name, driver, torch) and cached; CPU: interpreter, no roofs."""
    if not gpu_visible():
        return interpreter_info()
    from harness.sandbox import ChildStatus, run_child, scratch

    cache = cache_dir()
    workdir = scratch.make("ceil")
    try:
        res = run_child(
            "ceilings",
            {"cache_dir": str(cache), "refresh": refresh},
            workdir,
            limits=Limits(wall_s=300),
            cuda=True,
            isolate_fs=False,  # trusted code writing the cache; no candidate runs here
            writable=(str(cache),),
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if res.status is not ChildStatus.OK:
        raise RuntimeError(f"measuring device ceilings failed: {res.error}\n{res.output[-2000:]}")
    r = res.result
    return DeviceInfo(
        name=r["name"],
        kind="cuda",
        torch=r["torch"],
        triton=r["triton"],
        driver=r["driver"],
        cuda=r["cuda"],
        peak_tflops=r["peak_tflops"],
        peak_gbps=r["peak_gbps"],
        copy_gbps=r.get("copy_gbps"),
        read_gbps=r.get("read_gbps"),
        peak_tflops_by_dtype=r.get("peak_tflops_by_dtype", {}),
        method=r.get("method", ""),
        cached=r.get("cached", False),
    )
