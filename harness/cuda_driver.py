"""The CUDA driver API through ctypes: load a cubin, find a function, launch it.

Used on both sides of the trust boundary, always by our own code: the judge launches the
cubins of an untrusted candidate's plan with it (harness/replay.py), and CudaKernel
(harness/cuda_ext.py) launches its own builds with it outside a recording. Arguments are
typed by the kernel's declared parameter kinds (plan.CUDA_PARAMS), never guessed: a tensor
parameter takes a device pointer, numbers take their C type. The CUDA context is torch's
(the primary context torch made current on this thread).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION

C_TYPES = {
    "tensor": ctypes.c_uint64,
    "i32": ctypes.c_int32,
    "u32": ctypes.c_uint32,
    "i64": ctypes.c_int64,
    "u64": ctypes.c_uint64,
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
}


class CudaDriverError(RuntimeError):
    pass


class _ClusterDim(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class _AttrValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("cluster", _ClusterDim)]


class _LaunchAttr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _AttrValue)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_LaunchAttr)),
        ("numAttrs", ctypes.c_uint),
    ]


@functools.cache
def _lib() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise CudaDriverError(f"the CUDA driver library is not loadable: {exc}") from exc


def _check(code: int, what: str) -> None:
    if code != 0:
        name = ctypes.c_char_p()
        _lib().cuGetErrorName(code, ctypes.byref(name))
        label = name.value.decode() if name.value else str(code)
        raise CudaDriverError(f"{what}: {label}")


class Function:
    """One `__global__` function of a loaded cubin."""

    def __init__(self, cubin: bytes, name: str) -> None:
        lib = _lib()
        self.name = name
        self._image = ctypes.create_string_buffer(cubin, len(cubin))
        self.module = ctypes.c_void_p()
        _check(lib.cuModuleLoadData(ctypes.byref(self.module), self._image), f"loading {name}")
        self.handle = ctypes.c_void_p()
        _check(
            lib.cuModuleGetFunction(ctypes.byref(self.handle), self.module, name.encode()),
            f'finding {name} (is it declared extern "C" __global__?)',
        )
        self._shared_set = 48 * 1024

    def launch(
        self,
        grid: Sequence[int],
        block: Sequence[int],
        shared: int,
        cluster: Sequence[int],
        stream: int,
        params: Sequence[str],
        args: Sequence[int | float],
    ) -> None:
        lib = _lib()
        if shared > self._shared_set:
            _check(
                lib.cuFuncSetAttribute(self.handle, _MAX_DYNAMIC_SHARED, ctypes.c_int(shared)),
                f"{self.name}: {shared} bytes of dynamic shared memory",
            )
            self._shared_set = shared
        values: list = [C_TYPES[kind](value) for kind, value in zip(params, args, strict=True)]  # type: ignore[arg-type]
        pointers = (ctypes.c_void_p * max(1, len(values)))(
            *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values]
        )
        if tuple(cluster) == (1, 1, 1):
            _check(
                lib.cuLaunchKernel(
                    self.handle,
                    *(ctypes.c_uint(g) for g in grid),
                    *(ctypes.c_uint(b) for b in block),
                    ctypes.c_uint(shared),
                    ctypes.c_void_p(stream),
                    pointers,
                    None,
                ),
                f"launching {self.name}",
            )
            return
        attr = _LaunchAttr()
        attr.id = _CLUSTER_DIMENSION
        attr.value.cluster = _ClusterDim(*cluster)
        config = _LaunchConfig(
            *grid, *block, shared, ctypes.c_void_p(stream), ctypes.pointer(attr), 1
        )
        _check(
            lib.cuLaunchKernelEx(ctypes.byref(config), self.handle, pointers, None),
            f"launching {self.name} with cluster {tuple(cluster)}",
        )
