"""harness.cuda_ext's plain C-ABI libraries on the CPU: cache key, nvcc command line, pinned
header lookup, cache hits, and build errors. nvcc is the edge here (CI has none): a stand-in
script takes its place where a test needs a compiler; the real build is covered on the GPU by
kernels/tests/test_cutlass_family.py."""

from __future__ import annotations

import ctypes
import errno
import importlib.metadata
import os
import stat
from pathlib import Path

import pytest
import torch

from harness import cuda_ext
from harness.cuda_ext import BoundLibrary, CFunction, CudaBuildError, CudaLibrary

CUTLASS = f"nvidia-cutlass=={importlib.metadata.version('nvidia-cutlass')}"


@pytest.fixture
def nvcc(tmp_path, monkeypatch):
    """A stand-in nvcc: `--version` prints a release line; a build copies the source to the
    -o path (exit 0) unless the source contains FAIL (exit 1 with a compiler-like message)."""
    script = tmp_path / "bin" / "nvcc"
    script.parent.mkdir()
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.88";'
        " exit 0; fi\n"
        'out=""; last=""; prev=""\n'
        'for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; last="$a"; done\n'
        'if grep -q FAIL "$last"; then echo "error: expected a \';\'" >&2; exit 1; fi\n'
        'echo "$@" >> "$(dirname "$0")/calls"; cp "$last" "$out"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(cuda_ext, "nvcc_path", lambda: str(script))
    cuda_ext._NVCC_VERSION.clear()
    yield script
    cuda_ext._NVCC_VERSION.clear()


def lib(source="int f() { return 1; }", flags=("-O3",), headers=()):
    return CudaLibrary("kf_test", source, tuple(flags), tuple(headers))


def test_the_key_follows_source_flags_headers_and_the_nvcc_version(nvcc, monkeypatch):
    base = lib().key
    assert lib().key == base
    assert lib(source="int f() { return 2; }").key != base
    assert lib(flags=("-O2",)).key != base
    assert lib(headers=(CUTLASS,)).key != base
    monkeypatch.setattr(cuda_ext, "nvcc_version", lambda: "13.1.0")
    assert lib().key != base


def test_the_nvcc_version_is_read_from_the_compiler(nvcc):
    assert cuda_ext.nvcc_version() == "13.0.88"


def test_without_nvcc_the_key_raises_a_clear_build_error(monkeypatch):
    monkeypatch.setattr(cuda_ext, "nvcc_path", lambda: None)
    with pytest.raises(CudaBuildError, match="nvcc not found"):
        _ = lib().key


def test_the_command_line_builds_a_shared_library_with_the_pinned_headers(nvcc):
    command = lib(flags=("-O3", "-DX=1"), headers=(CUTLASS,)).command("in.cu", "out.so")
    assert command[0] == str(nvcc)
    assert command[1:3] == ["-O3", "-DX=1"]
    assert command[-5:] == ["-Xcompiler=-fPIC", "-shared", "-o", "out.so", "in.cu"]
    includes = [c[2:] for c in command if c.startswith("-I")]
    assert any(Path(d, "cutlass", "cutlass.h").is_file() for d in includes)
    assert any(Path(d, "cute", "tensor.hpp").is_file() for d in includes)
    assert any(Path(d, "cutlass", "util", "packed_stride.hpp").is_file() for d in includes)


def test_a_header_pin_other_than_the_installed_version_is_refused():
    with pytest.raises(CudaBuildError, match="nvidia-cutlass==0.0.1.*is installed"):
        cuda_ext.header_include_dirs("nvidia-cutlass==0.0.1")
    with pytest.raises(CudaBuildError, match="unknown header package"):
        cuda_ext.header_include_dirs("eigen==3.4.0")


def test_a_build_lands_under_its_key_and_is_found_there_next_time(nvcc, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("KF_COMPILE_CACHE", str(cache))
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    library = lib()
    assert cuda_ext.find_library(library) is None
    path = cuda_ext.build_library(library)
    assert path == str(cache / library.key / library.file_name)
    assert Path(path).read_text() == library.source  # the stand-in copies the source
    assert cuda_ext.find_library(library) == path
    assert not [p for p in os.listdir(cache / library.key) if p.startswith(".")]  # no partials
    assert cuda_ext.build_library(library) == path
    assert len((nvcc.parent / "calls").read_text().splitlines()) == 1  # no second compile


def test_in_the_sandbox_builds_go_to_the_scratch_folder_and_the_cache_is_only_read(
    nvcc, tmp_path, monkeypatch
):
    cache, scratch = tmp_path / "cache", tmp_path / "scratch"
    library = lib()
    (cache / library.key).mkdir(parents=True)
    monkeypatch.setenv("KF_COMPILE_CACHE", str(cache))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(scratch))
    path = cuda_ext.build_library(library)
    assert path.startswith(str(scratch / library.key))
    assert not os.listdir(cache / library.key)
    # The parent keeps it (compile_cache.keep_cuda_builds copies <scratch>/<key>/*.so) and a
    # later child finds it in the cache first.
    (cache / library.key / library.file_name).write_text("kept")
    assert cuda_ext.find_library(library) == str(cache / library.key / library.file_name)


def test_a_failed_build_raises_with_the_compiler_log(nvcc, tmp_path, monkeypatch):
    monkeypatch.setenv("KF_COMPILE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    with pytest.raises(CudaBuildError, match=r"nvcc failed building kf_test \(exit 1\)") as err:
        cuda_ext.build_library(lib(source="FAIL"))
    assert "expected a ';'" in str(err.value)


def test_a_cached_library_that_does_not_load_here_is_rebuilt(nvcc, tmp_path, monkeypatch):
    """A build carried from another machine may need a newer libc: a cache miss, not an error.
    (ctypes' loader is the edge here: the stand-in nvcc makes no real shared library.)"""
    cache = tmp_path / "cache"
    monkeypatch.setenv("KF_COMPILE_CACHE", str(cache))
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    library = lib()
    stale = cache / library.key / library.file_name
    stale.parent.mkdir(parents=True)
    stale.write_text("built elsewhere")
    loaded = []

    def fake_cdll(path):
        if Path(path).read_text() == "built elsewhere":
            raise OSError("version `GLIBC_2.99' not found")
        loaded.append(path)
        return object()

    monkeypatch.setattr(cuda_ext.ctypes, "CDLL", fake_cdll)
    monkeypatch.setattr(cuda_ext, "resource_usage", lambda path: {})
    cuda_ext.load_library(library, {})
    assert loaded == [str(stale)] and stale.read_text() == library.source  # rebuilt in place
    assert cuda_ext.last_build_report()["cached"] is False


def test_declared_functions_take_tensors_and_give_back_strings():
    """The binding on a real C library (this process's libc): a tensor goes in as its address,
    None as NULL, a const char* comes back as str."""
    libc = BoundLibrary(
        ctypes.CDLL(None),
        {
            "strlen": CFunction("int64_t", ("tensor",)),
            "strerror": CFunction("const char*", ("int",)),
            "time": CFunction("int64_t", ("tensor",)),
        },
    )
    text = torch.tensor(list(b"kernel\0forge\0"), dtype=torch.uint8)
    assert libc.strlen(text) == 6
    assert libc.strlen(text[7:]) == 5  # a view: the address of its first element
    assert libc.strerror(errno.ENOENT) == os.strerror(errno.ENOENT)
    assert libc.time(None) > 1_700_000_000  # NULL: time() only returns the clock
    with pytest.raises(TypeError, match="takes 1 arguments"):
        libc.strlen(text, text)
    with pytest.raises(ValueError, match="unknown C types"):
        CFunction("int", ("float*",))
