"""The kernel library carried between machines (harness/library_archive.py): built where there is
nvcc and no GPU, packed, and taken by a GPU machine of the same nvcc without a compile.
test_library_gpu.py screens such an archive on a GPU."""

import ctypes
import io
import json
import tarfile

import pytest

from harness import cuda_ext, device, library, library_archive
from kernels import parse_problem

BF16_NN = ("matmul/bf16/NN",)
KEY = "0123456789abcdef0123"


@pytest.fixture
def nvcc_13(monkeypatch):
    monkeypatch.setattr(cuda_ext, "nvcc_version", lambda: "13.0.88")


def _entry(seconds: float = 1.0, ok: bool = True) -> library.Entry:
    return library.Entry("matmul_cutlass_sm90", "matmul/bf16/NN", {"TILE_M": 128}, ok, seconds, "s")


def _machine(path, monkeypatch, entries: dict, files: tuple[str, ...] = ()) -> None:
    """A machine's cache at `path` holding `entries` and shared libraries named by key."""
    monkeypatch.setenv("KF_CACHE_DIR", str(path))
    for key, entry in entries.items():
        library._record(library.manifest_path(), key, entry)
    for key in files:
        so = path / "cuda-ext" / key / f"kf_cutlass_sm90_{key}.so"
        so.parent.mkdir(parents=True)
        so.write_bytes(b"\x7fELF build " + key.encode())


@pytest.mark.skipif(cuda_ext.nvcc_path() is None, reason="needs nvcc")
@pytest.mark.skipif(device.gpu_visible(), reason="a GPU machine's path: test_library_gpu.py")
def test_a_library_built_without_a_gpu_is_packed_and_taken_by_another_machine(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "builder"))
    # One real nvcc build (~1 min): the deadline passes while it runs, after planning (which
    # took over 0.1 s on a loaded 2-core box, so a tighter one started none).
    report = library.build(BF16_NN, workers=1, deadline_s=5.0)
    assert (report.built, report.failed) == (1, 0), report.failures
    archive = tmp_path / "library.tar.xz"
    info = library_archive.pack(archive)
    assert (info.builds, info.files) == (1, 1) and info.nvcc == cuda_ext.nvcc_version()

    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "worker"))
    problem = parse_problem("matmul", "3000x3000x3000", "bf16", "NN")
    assert library.points_for(problem) == []
    unpacked = library_archive.unpack(archive)
    assert (unpacked.builds_taken, unpacked.files_written) == (1, 1)
    (point,) = library.points_for(problem)
    assert point["params"] == library.planned(BF16_NN)[0].point
    (so,) = (tmp_path / "worker" / "cuda-ext").glob("*/*.so")
    assert ctypes.CDLL(str(so)).kf_abi_version() >= 1  # a real library, loadable here
    again = library_archive.unpack(archive)
    assert (again.builds_taken, again.files_written) == (0, 0)


def test_unpacking_keeps_the_machines_own_builds_and_takes_the_rest(tmp_path, monkeypatch, nvcc_13):
    _machine(
        tmp_path / "builder",
        monkeypatch,
        {"a": _entry(9.0), "b": _entry(2.0), "c": _entry(ok=False)},
        files=(KEY,),
    )
    archive = tmp_path / "library.tar.xz"
    info = library_archive.pack(archive)
    assert (info.builds, info.files) == (2, 1)  # the failed build is not carried

    _machine(tmp_path / "worker", monkeypatch, {"a": _entry(5.0), "c": _entry(ok=False)})
    unpacked = library_archive.unpack(archive)
    assert (unpacked.builds_taken, unpacked.files_written) == (1, 1)
    entries = library.load()
    assert entries["a"].seconds == 5.0  # its own build, not the archive's
    assert entries["b"].ok and not entries["c"].ok
    so = tmp_path / "worker" / "cuda-ext" / KEY / f"kf_cutlass_sm90_{KEY}.so"
    assert so.read_bytes() == b"\x7fELF build " + KEY.encode()


def test_an_archive_of_another_nvcc_is_refused_whole(tmp_path, monkeypatch, nvcc_13):
    _machine(tmp_path / "builder", monkeypatch, {"a": _entry()}, files=(KEY,))
    archive = tmp_path / "library.tar.xz"
    library_archive.pack(archive)
    monkeypatch.setattr(cuda_ext, "nvcc_version", lambda: "13.1.0")
    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "worker"))
    with pytest.raises(ValueError, match="built with nvcc 13.0.88, this machine has 13.1.0"):
        library_archive.unpack(archive)
    assert library.load() == {}
    assert not (tmp_path / "worker" / "cuda-ext").exists()


def test_only_shared_libraries_named_by_their_key_are_written(tmp_path, monkeypatch, nvcc_13):
    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "worker"))
    archive = tmp_path / "crafted.tar.xz"
    members = {
        library_archive.INFO: json.dumps(
            {"nvcc": "13.0.88", "builds": 0, "files": 1, "packed_at": "", "host": ""}
        ).encode(),
        f"library/{library.manifest_path().name}": b"[]",
        f"cuda-ext/{KEY}/kf_cutlass_sm90_{KEY}.so": b"good",
        f"cuda-ext/{KEY}/../../../outside_{KEY}.so": b"bad",
        f"cuda-ext/{KEY}/kf_other_ffffffffffffffffffff.so": b"bad",  # not its folder's key
        f"cuda-ext/{KEY}/notes.txt": b"bad",
        "library/../../escape.json": b"bad",
    }
    with tarfile.open(archive, "w:xz") as tar:
        for name, data in members.items():
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    unpacked = library_archive.unpack(archive)
    assert unpacked.files_written == 1
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert f"worker/cuda-ext/{KEY}/kf_cutlass_sm90_{KEY}.so" in written
    assert not [p for p in written if "bad" in p or "escape" in p or "outside" in p]
    assert all(p.startswith(("worker/", "crafted")) for p in written), written


def test_a_file_that_is_not_a_library_archive_says_so(tmp_path, monkeypatch, nvcc_13, capsys):
    monkeypatch.setenv("KF_CACHE_DIR", str(tmp_path / "worker"))
    other = tmp_path / "other.tar.xz"
    with tarfile.open(other, "w:xz") as tar:
        tar.addfile(tarfile.TarInfo("README"), io.BytesIO(b""))
    assert library.main(["unpack", str(other)]) == 2
    assert "not a kernel library archive" in capsys.readouterr().err
    junk = tmp_path / "junk.tar.xz"
    junk.write_text("not a tarball")
    assert library.main(["unpack", str(junk)]) == 2
    assert "unpack:" in capsys.readouterr().err


@pytest.mark.skipif(device.gpu_visible(), reason="on a GPU a candidate is recorded")
def test_without_a_gpu_only_our_own_renders_are_built_never_a_candidates_code():
    from harness.precompile import precompile
    from harness.results import Backend, Candidate

    foreign = Candidate(
        "import torch\n\ndef run(a, b, *, out):\n    out.copy_(a @ b)\n", Backend.CUDA
    )
    problem = parse_problem("matmul", "256x256x256", "bf16", "NN")
    result = precompile(foreign, problem, build_without_gpu=True)
    assert not result.ok and "need a GPU" in result.error
