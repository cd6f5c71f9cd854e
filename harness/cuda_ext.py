"""CUDA C++ candidates: build with load_inline, cache by source hash + flags, report resources.

A CUDA candidate is still one Python module defining run(*inputs, out); it builds its kernel at
import time with `load_cuda`, for example

    from harness.cuda_ext import load_cuda
    _ext = load_cuda("axpy", cuda_source=CUDA, cpp_source=CPP, functions=["axpy"])
    def run(x, y, *, out): _ext.axpy(x, y, out)

The build runs inside the candidate's sandbox (compilation is untrusted execution too). The
compile cache is read-only for the candidate: the parent seeds it (KF_COMPILE_CACHE) and copies a
fresh build into it after the sandbox exits, keyed by the hash of sources, flags, torch/CUDA
versions and GPU architecture. The resource report (registers, local memory, static shared
memory per kernel) comes from `cuobjdump -res-usage` on the built library.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import time

DEFAULT_CUDA_FLAGS = ("-O3", "-lineinfo")
_REPORTS: list[dict] = []


def cache_key(name: str, cuda_source: str, cpp_source: str, functions, flags) -> str:
    import torch

    arch = ""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        arch = f"sm_{major}{minor}"
    text = "\0".join(
        [
            name,
            cuda_source,
            cpp_source,
            ",".join(functions),
            " ".join(flags),
            torch.__version__,
            str(torch.version.cuda),
            arch,
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def load_cuda(
    name: str,
    *,
    cuda_source: str,
    cpp_source: str,
    functions: list[str],
    extra_cuda_cflags: tuple[str, ...] = DEFAULT_CUDA_FLAGS,
):
    from torch.utils.cpp_extension import load_inline

    key = cache_key(name, cuda_source, cpp_source, functions, extra_cuda_cflags)
    module_name = f"{name}_{key}"
    t0 = time.perf_counter()
    cached_dir = os.path.join(os.environ.get("KF_COMPILE_CACHE", "/nonexistent"), key)
    found = glob.glob(os.path.join(cached_dir, f"{module_name}*.so"))
    if found:
        module = _import_so(module_name, found[0])
        _REPORTS.append(
            {"cached": True, "key": key, "so": found[0], "seconds": time.perf_counter() - t0}
        )
        _REPORTS[-1].update(resource_usage(found[0]))
        return module
    build_dir = os.path.join(os.environ.get("TORCH_EXTENSIONS_DIR", "/tmp"), key)
    os.makedirs(build_dir, exist_ok=True)
    module = load_inline(
        name=module_name,
        cpp_sources=[cpp_source],
        cuda_sources=[cuda_source],
        functions=functions,
        extra_cuda_cflags=list(extra_cuda_cflags),
        build_directory=build_dir,
        verbose=False,
    )
    report = {"cached": False, "key": key, "so": module.__file__, "build_dir": build_dir}
    report["seconds"] = time.perf_counter() - t0
    report.update(resource_usage(module.__file__))
    _REPORTS.append(report)
    return module


def _import_so(module_name: str, path: str):
    import torch  # noqa: F401  (links against torch's libraries)

    loader = importlib.machinery.ExtensionFileLoader(module_name, path)
    spec = importlib.util.spec_from_loader(module_name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


_RES = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def parse_res_usage(text: str) -> dict:
    """Worst case over the kernels in `cuobjdump -res-usage` output."""
    regs = stack = shared = local = None
    for m in _RES.finditer(text):
        r, st, sh, lo = (int(x) for x in m.groups())
        regs = max(regs or 0, r)
        stack = max(stack or 0, st)
        shared = max(shared or 0, sh)
        local = max(local or 0, lo)
    if regs is None:
        return {}
    return {"registers": regs, "spills": local, "shared_mem_bytes": shared, "stack_bytes": stack}


def resource_usage(so_path: str) -> dict:
    tool = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    try:
        text = subprocess.run(
            [tool, "-res-usage", so_path], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return {"resource_error": str(exc)[:200]}
    return parse_res_usage(text)


def last_build_report() -> dict:
    """Merged report of the builds this process made (for CompileResult)."""
    if not _REPORTS:
        return {}
    merged = {"cached": all(r.get("cached") for r in _REPORTS), "builds": list(_REPORTS)}
    for field in ("registers", "spills", "shared_mem_bytes"):
        values = [r[field] for r in _REPORTS if r.get(field) is not None]
        merged[field] = max(values) if values else None
    return merged
