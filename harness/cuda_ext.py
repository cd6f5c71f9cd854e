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

import contextlib
import ctypes
import fcntl
import glob
import hashlib
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

DEFAULT_CUDA_FLAGS = ("-O3", "-lineinfo")
_REPORTS: list[dict] = []
# Set by the recorder in an untrusted candidate's sandbox (harness/child/recorder.py): host
# libraries are refused there (their host code would have to run in the judge's process),
# and CudaKernel launches are recorded instead of run.
host_libraries_refused = ""
# Set by the screening child (harness/screen_child.py): it loads builds, never makes one. Its
# compile children built every CUDA C++ render ahead; a build there would take a candidate's
# whole turn (nvcc: tens of seconds) and end the child, so a render missing from the cache
# fails at once, saying so.
builds_refused = ""


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

    if host_libraries_refused:
        raise CudaBuildError(host_libraries_refused)
    key = cache_key(name, cuda_source, cpp_source, functions, extra_cuda_cflags)
    module_name = f"{name}_{key}"
    t0 = time.perf_counter()
    cached_dir = os.path.join(os.environ.get("KF_COMPILE_CACHE", "/nonexistent"), key)
    found = glob.glob(os.path.join(cached_dir, f"{module_name}*.so"))
    if found:
        module = import_extension(module_name, found[0])
        _REPORTS.append(
            {"cached": True, "key": key, "so": found[0], "seconds": time.perf_counter() - t0}
        )
        _REPORTS[-1].update(resource_usage(found[0]))
        return module
    if builds_refused:
        raise CudaBuildError(builds_refused)
    build_dir = os.path.join(os.environ.get("TORCH_EXTENSIONS_DIR", "/tmp"), key)
    os.makedirs(build_dir, exist_ok=True)
    with build_lock(build_dir):
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


@contextlib.contextmanager
def build_lock(build_dir: str):
    """One build per folder at a time, under a lock the kernel drops when its holder dies.

    torch's own lock is a file (`lock`) that its FileBaton polls for until it is gone. A build
    killed at its wall limit (the harness ends children at their deadline) leaves it behind,
    and every later load of that source then waits on it until its own limit. The likely
    cause of a screen that lost all of matmul_cuda_wmma's points to "screening child timeout"
    (H100, 2026-11-28): a worker's cache kept such a `lock` beside a half-built extension
    (H200 host, the same day). Whoever holds this lock is the only live builder here, so a
    `lock` file it finds is stale and goes."""
    with open(os.path.join(build_dir, ".kf-build.lock"), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(build_dir, "lock"))
        yield


def import_extension(module_name: str, path: str):
    """Import a built extension module from its .so, without torch's build lock or folder."""
    import torch  # noqa: F401  (links against torch's libraries)

    loader = importlib.machinery.ExtensionFileLoader(module_name, path)
    spec = importlib.util.spec_from_loader(module_name, loader)
    if spec is None:
        raise ImportError(f"cannot import the extension {path}")
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


# ---------------------------------------------------------------- plain C-ABI libraries
#
# A candidate may also build its CUDA code as a plain shared library with `extern "C"` entry
# points it declares and calls through BoundLibrary (the CUTLASS family does): no torch headers, no pybind11, so
# the build does not depend on the torch version and can be made on a machine without a GPU
# and carried to one. The cache layout is the one above (<cache>/<key>/<file>.so, built under
# TORCH_EXTENSIONS_DIR/<key>/ in the sandbox and kept by the parent), with its own key.

LIBRARY_CACHE_VERSION = "kf-cuda-lib-v1"
NVCC_TIMEOUT_S = 1200  # CUTLASS kernels take minutes on a busy core


class CudaBuildError(RuntimeError):
    """nvcc is missing or failed; the message ends with the compiler's log."""


@dataclass(frozen=True)
class CudaLibrary:
    """One nvcc build of a self-contained .cu source into a C-ABI shared library.

    The key is the source, the flags (the target architecture belongs there), the pinned header
    packages and the nvcc version. `headers` names pip packages that ship C++ headers, pinned
    ("nvidia-cutlass==4.2.0.0"); their include folders are found in the installed package at
    build time only, so a cached build needs neither the package nor its path.
    """

    name: str
    source: str
    flags: tuple[str, ...]
    headers: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        parts = [LIBRARY_CACHE_VERSION, self.name, self.source, *self.flags, *self.headers]
        text = "\0".join(parts) + "\0nvcc " + nvcc_version()
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    @property
    def file_name(self) -> str:
        return f"{self.name}_{self.key}.so"

    def command(self, source_path: str, output_path: str) -> list[str]:
        """The nvcc command line that builds `source_path` into `output_path`."""
        includes = [f"-I{d}" for pin in self.headers for d in header_include_dirs(pin)]
        return [
            nvcc_path() or "nvcc",
            *self.flags,
            *includes,
            "-Xcompiler=-fPIC",
            "-shared",
            "-o",
            output_path,
            source_path,
        ]


# Header-only pip packages: (import package, include folders inside it).
HEADER_PACKAGES = {
    "nvidia-cutlass": ("cutlass_library", ("source/include", "source/tools/util/include")),
}


def header_include_dirs(pin: str) -> list[str]:
    """Include folders of the installed package pinned as 'name==version'; CudaBuildError when
    it is missing or another version is installed (a build must use the pinned headers)."""
    import importlib.metadata
    import importlib.util

    name, _, version = pin.partition("==")
    if name not in HEADER_PACKAGES:
        raise CudaBuildError(f"unknown header package {name!r}; known: {sorted(HEADER_PACKAGES)}")
    try:
        installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != version:
        found = f"version {installed} is installed" if installed else "it is not installed"
        raise CudaBuildError(f"building needs {pin} (pip install {pin}); {found}")
    package, folders = HEADER_PACKAGES[name]
    spec = importlib.util.find_spec(package)  # locates it without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise CudaBuildError(f"{pin} is installed but its package {package!r} is not importable")
    root = list(spec.submodule_search_locations)[0]
    return [os.path.join(root, folder) for folder in folders]


def nvcc_path() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    found = shutil.which("nvcc") or os.path.join(home, "bin", "nvcc")
    return found if os.path.isfile(found) else None


_NVCC_VERSION: dict[str, str] = {}


def nvcc_version() -> str:
    """'13.0.88' from `nvcc --version` (once per process); CudaBuildError without nvcc."""
    path = nvcc_path()
    if path is None:
        raise CudaBuildError("nvcc not found (PATH, CUDA_HOME): CUDA C++ cannot be built here")
    if path not in _NVCC_VERSION:
        text = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=60
        ).stdout
        m = re.search(r"V(\d+\.\d+\.\d+)", text) or re.search(r"release (\d+\.\d+)", text)
        _NVCC_VERSION[path] = m.group(1) if m else text.strip()[-80:]
    return _NVCC_VERSION[path]


def library_build_root() -> str:
    """Where a build goes: the sandbox's scratch build folder, else the writable cache, else
    a temporary folder."""
    return (
        os.environ.get("TORCH_EXTENSIONS_DIR")
        or os.environ.get("KF_COMPILE_CACHE")
        or os.path.join(tempfile.gettempdir(), "kf-cuda-lib")
    )


def find_library(lib: CudaLibrary) -> str | None:
    """A cached or already built library file for `lib`, if any."""
    for root in (os.environ.get("KF_COMPILE_CACHE"), library_build_root()):
        if root:
            path = os.path.join(root, lib.key, lib.file_name)
            if os.path.isfile(path):
                return path
    return None


def build_library(lib: CudaLibrary, root: str | None = None, *, rebuild: bool = False) -> str:
    """Build `lib` under `root`/<key>/ (nothing to do if it is there, unless `rebuild`);
    returns the .so path."""
    folder = os.path.join(root or library_build_root(), lib.key)
    target = os.path.join(folder, lib.file_name)
    if os.path.isfile(target) and not rebuild:
        return target
    os.makedirs(folder, exist_ok=True)
    source = os.path.join(folder, f"{lib.name}.cu")
    with open(source, "w") as f:
        f.write(lib.source)
    # Built aside and renamed: a concurrent reader never loads half a file.
    partial = os.path.join(folder, f".{lib.file_name}.{os.getpid()}.{time.monotonic_ns()}")
    try:
        proc = subprocess.run(
            lib.command(source, partial),
            stdin=subprocess.DEVNULL,  # the compiler never reads one; a worker's must not leak in
            capture_output=True,
            text=True,
            timeout=NVCC_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        raise CudaBuildError(f"nvcc ran past {NVCC_TIMEOUT_S} s building {lib.name}") from exc
    if proc.returncode != 0 or not os.path.isfile(partial):
        log = (proc.stdout + proc.stderr)[-6000:]
        raise CudaBuildError(f"nvcc failed building {lib.name} (exit {proc.returncode}):\n{log}")
    os.replace(partial, target)
    return target


# C types a library function is declared with. "tensor" is passed as the address of a torch
# tensor (None: NULL), so a candidate module never handles ctypes or raw addresses itself: the
# static scan flags both in candidate code, and this module is trusted.
C_TYPES = {
    "int": ctypes.c_int,
    "int64_t": ctypes.c_int64,
    "void*": ctypes.c_void_p,
    "tensor": ctypes.c_void_p,
    "const char*": ctypes.c_char_p,
}


@dataclass(frozen=True)
class CFunction:
    """An exported `extern "C"` function as the caller declares it: result and argument C
    types, names from C_TYPES."""

    returns: str
    args: tuple[str, ...] = ()

    def __post_init__(self):
        unknown = {self.returns, *self.args} - set(C_TYPES)
        if unknown:
            raise ValueError(f"unknown C types {sorted(unknown)}; known: {sorted(C_TYPES)}")


class BoundLibrary:
    """A loaded library's declared functions, called with tensors and Python numbers;
    a `const char*` result comes back as str."""

    def __init__(self, handle: ctypes.CDLL, functions: dict[str, CFunction]):
        self.handle = handle
        for name, declared in functions.items():
            setattr(self, name, _bound(getattr(handle, name), declared))


def _bound(function, declared: CFunction):
    function.argtypes = [C_TYPES[kind] for kind in declared.args]
    function.restype = C_TYPES[declared.returns]
    tensors = [i for i, kind in enumerate(declared.args) if kind == "tensor"]

    def call(*args):
        if len(args) != len(declared.args):
            raise TypeError(f"{function.__name__} takes {len(declared.args)} arguments")
        if tensors:
            args = list(args)
            for i in tensors:
                args[i] = None if args[i] is None else args[i].data_ptr()
        result = function(*args)
        return result.decode() if declared.returns == "const char*" and result else result

    return call


def load_library(lib: CudaLibrary, functions: dict[str, CFunction]) -> BoundLibrary:
    """The cached build of `lib`, else a fresh one, with its declared `functions` bound;
    reported like load_cuda."""
    if host_libraries_refused:
        raise CudaBuildError(host_libraries_refused)
    t0 = time.perf_counter()
    path = find_library(lib)
    handle, stale = None, False
    if path is not None:
        try:
            handle = ctypes.CDLL(path)
        except OSError:  # built elsewhere against a newer libc/libstdc++: a cache miss
            stale = True
    cached = handle is not None
    if path is None or handle is None:  # (no handle without a path: this tells mypy)
        if builds_refused:
            raise CudaBuildError(builds_refused)
        path = build_library(lib, rebuild=stale)
        handle = ctypes.CDLL(path)
    report = {"cached": cached, "key": lib.key, "so": path, "seconds": time.perf_counter() - t0}
    if path not in _LIBRARY_RESOURCES:  # one cuobjdump per file, however often it is loaded
        _LIBRARY_RESOURCES[path] = resource_usage(path)
    report.update(_LIBRARY_RESOURCES[path])
    _REPORTS.append(report)
    return BoundLibrary(handle, functions)


_LIBRARY_RESOURCES: dict[str, dict] = {}


# ---------------------------------------------------------------- device-code-only kernels
#
# What an untrusted candidate may use for CUDA C++: `extern "C" __global__` functions, built
# by nvcc into a cubin and launched with a grid, a block, dynamic shared memory and a cluster
# shape, arguments typed by the declared parameter kinds (plan.CUDA_PARAMS):
#
#     ADD = CudaKernel(SOURCE, "add", ("tensor", "tensor", "tensor", "i32"))
#     def run(x, y, *, out):
#         n = out.numel()
#         ADD[(triton.cdiv(n, 256),), (256,)](x, y, out, n)
#
# No host code of the candidate's ever runs in the judge's process: in its sandbox a launch
# is recorded (the cubin and the launch, as a plan step), and the judge launches the cubin
# itself (harness/replay.py, harness/cuda_driver.py).

CUBIN_FLAGS = ("-O3", "-lineinfo")


@dataclass(frozen=True)
class CudaKernel:
    source: str
    name: str
    params: tuple[str, ...]
    flags: tuple[str, ...] = CUBIN_FLAGS

    def __post_init__(self):
        from harness.plan import CUDA_PARAMS

        unknown = set(self.params) - CUDA_PARAMS
        if unknown:
            raise ValueError(
                f"unknown parameter kinds {sorted(unknown)}; known: {sorted(CUDA_PARAMS)}"
            )

    def __getitem__(self, config):
        """kernel[grid, block], [grid, block, shared] or [grid, block, shared, cluster]."""
        grid, block, *rest = config
        shared = rest[0] if rest else 0
        cluster = rest[1] if len(rest) > 1 else (1, 1, 1)

        def call(*args):
            launch_hook(self, _dims(grid), _dims(block), int(shared), _dims(cluster), args)

        return call


def _dims(value) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(value)
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


def _arch() -> str:
    import torch

    major, minor = torch.cuda.get_device_capability()
    # sm_90a: wgmma, setmaxnreg and TMA multicast need the architecture-specific target.
    return f"sm_{major}{minor}a" if major >= 9 else f"sm_{major}{minor}"


_CUBINS: dict[tuple, bytes] = {}


def build_cubin(kernel: CudaKernel) -> bytes:
    """nvcc -cubin for this GPU (once per process per kernel); CudaBuildError on failure."""
    arch = _arch()
    key = (kernel.source, kernel.flags, arch)
    if key not in _CUBINS:
        nvcc = nvcc_path()
        if nvcc is None:
            raise CudaBuildError("nvcc not found (PATH, CUDA_HOME): CUDA C++ cannot be built here")
        with tempfile.TemporaryDirectory(prefix="kf-cubin-") as folder:
            source = os.path.join(folder, "kernel.cu")
            target = os.path.join(folder, "kernel.cubin")
            with open(source, "w") as f:
                f.write(kernel.source)
            proc = subprocess.run(
                [nvcc, "-cubin", f"-arch={arch}", *kernel.flags, "-o", target, source],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=NVCC_TIMEOUT_S,
            )
            if proc.returncode != 0 or not os.path.isfile(target):
                log = (proc.stdout + proc.stderr)[-6000:]
                raise CudaBuildError(f"nvcc failed building {kernel.name}:\n{log}")
            with open(target, "rb") as f:
                cubin = f.read()
        if kernel.name.encode() not in cubin:
            raise CudaBuildError(
                f'the cubin has no function {kernel.name!r}: declare it extern "C" __global__'
            )
        _CUBINS[key] = cubin
    return _CUBINS[key]


_FUNCTIONS: dict[tuple, object] = {}


def _launch(kernel: CudaKernel, grid, block, shared: int, cluster, args) -> None:
    """Build (once), load (once) and launch on torch's current stream."""
    import torch

    from harness import cuda_driver

    key = (kernel.source, kernel.flags, kernel.name)
    function = _FUNCTIONS.get(key)
    if function is None:
        function = _FUNCTIONS[key] = cuda_driver.Function(build_cubin(kernel), kernel.name)
    values = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
    stream = torch.cuda.current_stream().cuda_stream
    function.launch(grid, block, shared, cluster, stream, kernel.params, values)  # type: ignore[attr-defined]


launch_hook = _launch
