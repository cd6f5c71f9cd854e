"""The kernel library carried between machines: packed where it was built, unpacked where it runs.

A CUTLASS build depends on its source, flags, pinned headers and nvcc version (its key,
harness.cuda_ext.CudaLibrary), not on a GPU. So a machine with the GPU workers' nvcc and no GPU
can build the library (`python -m harness.library build`: nvcc only, nothing is run), and a GPU
machine with the same nvcc takes the archive instead of spending its first minutes of CPU on
it (a fresh device machine built 56 of bf16/NN's 300 in 4.4 min, both_ways_h200_4shapes_d.json).

The archive holds this nvcc version's manifest (its good builds) and the shared libraries of
the compile cache (`cuda-ext/<key>/<name>_<key>.so`, each named by its key). Unpacking merges
the manifest into the machine's own, keeps every build the machine made itself, and refuses an
archive of another nvcc version whole. A library that does not load on the target (another
libc) is rebuilt there on first use (cuda_ext.load_library).

    python -m harness.library pack OUT.tar.xz
    python -m harness.library unpack ARCHIVE
"""

from __future__ import annotations

import io
import json
import lzma
import os
import re
import socket
import tarfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

INFO = "library/archive.json"
_SHARED_LIBRARY = re.compile(r"^cuda-ext/([0-9a-f]{20})/[A-Za-z0-9_]+_\1\.so$")


@dataclass(frozen=True)
class ArchiveInfo:
    nvcc: str
    builds: int  # good builds in the manifest
    files: int  # shared libraries
    packed_at: str
    host: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Unpacked:
    archive: ArchiveInfo
    builds_taken: int  # manifest entries this machine did not have built
    files_written: int  # shared libraries it did not have
    bytes: int  # the archive's size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pack(out: Path) -> ArchiveInfo:
    """This machine's library (manifest and shared libraries) as one xz tarball at `out`."""
    from harness import library
    from harness.compile_cache import cuda_ext_dir
    from harness.cuda_ext import nvcc_version

    manifest = library.manifest_path()
    entries = {k: e for k, e in library.load(manifest).items() if e.ok}
    cache = cuda_ext_dir()
    named = ((f, f"cuda-ext/{f.relative_to(cache).as_posix()}") for f in cache.glob("*/*.so"))
    files = sorted((f, name) for f, name in named if _SHARED_LIBRARY.match(name))
    info = ArchiveInfo(
        nvcc=nvcc_version(),
        builds=len(entries),
        files=len(files),
        packed_at=datetime.now(UTC).isoformat(timespec="seconds"),
        host=socket.gethostname(),
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}")
    with tarfile.open(partial, "w:xz") as tar:
        _add_bytes(tar, INFO, json.dumps(info.to_dict(), indent=1).encode())
        _add_bytes(tar, f"library/{manifest.name}", library.to_json(entries).encode())
        for f, name in files:
            tar.add(f, arcname=name, recursive=False)
    os.replace(partial, out)
    return info


def unpack(archive: Path) -> Unpacked:
    """Merges a packed library into this machine's; ValueError for an archive of another nvcc
    version or a file that is not a library archive."""
    from harness import library

    try:
        with tarfile.open(archive, "r:xz") as tar:
            info, entries, written = _take(tar)
    except (tarfile.TarError, EOFError, lzma.LZMAError) as exc:
        raise ValueError(f"{archive}: not a kernel library archive ({exc})") from exc
    taken = library.adopt(entries)
    return Unpacked(info, taken, written, archive.stat().st_size)


def _take(tar: tarfile.TarFile) -> tuple[ArchiveInfo, dict, int]:
    """The archive's info and manifest entries; writes the shared libraries this machine lacks
    (only regular files named by their key, each under its key's folder)."""
    from harness import library
    from harness.compile_cache import cuda_ext_dir
    from harness.cuda_ext import nvcc_version

    info = ArchiveInfo(**json.loads(_read(tar, INFO)))
    here = nvcc_version()
    if info.nvcc != here:
        raise ValueError(
            f"{os.fsdecode(tar.name or '')}: built with nvcc {info.nvcc}, this machine has {here}: "
            "none of its builds would be found here"
        )
    entries = library.from_json(_read(tar, f"library/{library.manifest_path().name}"))
    cache = cuda_ext_dir()
    written = 0
    for member in tar.getmembers():
        if not (member.isfile() and _SHARED_LIBRARY.match(member.name)):
            continue
        target = cache / member.name.removeprefix("cuda-ext/")
        source = tar.extractfile(member)
        if target.is_file() or source is None:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        partial.write_bytes(source.read())
        partial.chmod(0o755)
        os.replace(partial, target)  # a concurrent loader never sees half a file
        written += 1
    return info, entries, written


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    member.mtime = int(datetime.now(UTC).timestamp())
    tar.addfile(member, io.BytesIO(data))


def _read(tar: tarfile.TarFile, name: str) -> bytes:
    try:
        member = tar.extractfile(name)
    except KeyError:
        member = None
    if member is None:
        raise ValueError(f"{os.fsdecode(tar.name or '')}: not a kernel library archive (no {name})")
    return member.read()
