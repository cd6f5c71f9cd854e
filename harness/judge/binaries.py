"""The judge's side of a plan on a GPU: load the candidate's kernels, launch them ourselves.

A Triton kernel arrives as its cubin plus the metadata Triton's own cache would hold; we
check the metadata (this GPU's architecture, sane sizes, signature types from an allow-list),
write both into a folder of this process's and let Triton's CompiledKernel load it and build
its launcher (generated C, from the checked signature alone). A CUDA kernel arrives as a cubin
and its declared parameter kinds; harness/cuda_driver.py loads and launches it. Every cubin is
read from the artifact store by its sha256 and hashed again before it is loaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness import plan as P
from harness.judge import artifacts
from harness.replay import Launcher

MAX_SCRATCH_PER_PROGRAM = 1 << 20  # Triton's global/profile scratch, bytes per program


class GpuLauncher(Launcher):
    def __init__(self, store: str, folder: str) -> None:
        self.store = store
        self.folder = Path(folder)
        self._triton: dict[str, Any] = {}
        self._cuda: dict[str, Any] = {}
        self._blobs: dict[str, bytes] = {}

    def blob(self, sha: str) -> bytes:
        if sha not in self._blobs:
            self._blobs[sha] = artifacts.read(self.store, sha)
        return self._blobs[sha]

    def triton(self, plan: P.Plan, step: P.Launch, args: tuple, kwargs: dict) -> None:
        kernel = plan.kernels[step.kernel]
        assert isinstance(kernel, P.TritonKernel)
        compiled = self._triton.get(kernel.binary)
        if compiled is None:
            compiled = self._triton[kernel.binary] = self._load_triton(kernel)
        import torch

        stream = torch.cuda.current_stream().cuda_stream
        gx, gy, gz = step.grid
        compiled.run(
            gx, gy, gz, stream, compiled.function, compiled.packed_metadata, None, None, None, *args
        )

    def cuda(self, plan: P.Plan, step: P.CudaLaunch, args: tuple) -> None:
        import torch

        from harness import cuda_driver

        kernel = plan.kernels[step.kernel]
        assert isinstance(kernel, P.CudaKernel)
        function = self._cuda.get(kernel.binary)
        if function is None:
            function = cuda_driver.Function(self.blob(kernel.binary), kernel.name)
            self._cuda[kernel.binary] = function
        stream = torch.cuda.current_stream().cuda_stream
        function.launch(
            step.grid, step.block, step.shared, step.cluster, stream, kernel.params, args
        )

    def _load_triton(self, kernel: P.TritonKernel):
        from triton.compiler.compiler import CompiledKernel

        metadata = check_metadata(kernel)
        folder = self.folder / kernel.binary
        folder.mkdir(parents=True, exist_ok=True)
        meta_path = folder / f"{kernel.name}.json"
        cubin_path = folder / f"{kernel.name}.cubin"
        meta_path.write_text(json.dumps(metadata))
        cubin_path.write_bytes(self.blob(kernel.binary))
        src = SimpleNamespace(
            signature=dict(kernel.signature),
            constants=dict(kernel.constants),
            fn=SimpleNamespace(arg_names=list(kernel.arg_names)),
        )
        group = {meta_path.name: str(meta_path), cubin_path.name: str(cubin_path)}
        compiled = CompiledKernel(src, group, kernel.binary)
        compiled._init_handles()  # the launcher's C and the module load: errors show here
        return compiled


def check_metadata(kernel: P.TritonKernel) -> dict[str, Any]:
    """Triton's metadata for this kernel, or PlanError: it must be for this GPU, and every
    size the launcher acts on must be sane."""
    import torch

    md = dict(kernel.metadata)
    target = md.get("target")
    major, minor = torch.cuda.get_device_capability()
    if not isinstance(target, dict) or (
        target.get("backend"),
        target.get("arch"),
        target.get("warp_size"),
    ) != ("cuda", major * 10 + minor, 32):
        raise P.PlanError(f"kernel {kernel.name} was not compiled for this GPU: {target!r:.100}")
    if md.get("name") != kernel.name:
        raise P.PlanError("the kernel's metadata names another kernel")
    _int_in(md, "num_warps", 1, 32)
    _int_in(md, "num_ctas", 1, 16)
    _int_in(md, "shared", 0, 1 << 20)
    for key in ("global_scratch_size", "profile_scratch_size"):
        _int_in(md, key, 0, MAX_SCRATCH_PER_PROGRAM, default=0)
    for key in ("global_scratch_align", "profile_scratch_align"):
        _int_in(md, key, 1, 4096, default=1)
    for key in ("launch_cooperative_grid", "launch_pdl"):
        if not isinstance(md.get(key, False), bool):
            raise P.PlanError(f"metadata {key} is not true/false")
    descs = md.get("tensordesc_meta")
    if descs is not None:
        if not isinstance(descs, list) or len(descs) > 64:
            raise P.PlanError("tensordesc_meta is not a short list")
        for d in descs:
            if not isinstance(d, dict):
                raise P.PlanError("a tensordesc_meta entry is not an object")
            for key in ("swizzle", "elem_size", "elem_type"):
                _int_in(d, key, 0, 64)
            blocks = d.get("block_size")
            if not isinstance(blocks, list) or not all(
                isinstance(b, int) and 0 < b <= 256 for b in blocks
            ):
                raise P.PlanError("a TMA block size is out of range")
    return md


def _int_in(d: dict, key: str, lo: int, hi: int, default: int | None = None) -> None:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise P.PlanError(f"metadata {key}={value!r:.40} is out of range [{lo}, {hi}]")


def launcher_folder(workdir: str) -> str:
    path = os.path.join(workdir, "kernels")
    os.makedirs(path, exist_ok=True)
    return path
