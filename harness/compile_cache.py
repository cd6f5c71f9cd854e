"""The compile cache: compiled kernels kept by the hash of the source that produced them.

Keyed by sha256 of a candidate's source, backend, device kind and the torch/triton versions.
A sandboxed child only ever writes its own scratch folder (Landlock): the parent seeds
`<workdir>/triton-cache` from the candidate's own key before the child starts (`seed_cache`)
and copies new files back to that key after the child exits (`keep_cache`), so a candidate can
reach no other key's cache, and a source compiled once (by a precompile or an evaluation) is
not compiled again. CUDA C++ builds are kept the same way under `cuda-ext/` keyed by source +
flags (`keep_cuda_builds`; harness/cuda_ext.py reads them).

The screen (harness/screen.py) compiles only renders of our own families, which are trusted
code, into one shared Triton cache (`screen_triton_dir`) that no candidate sandbox is given.

Used by evaluation.py, precompile.py and screen.py (parent side only; no torch import).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.results import Candidate

CACHE_VERSION = "kf-compile-v1"
TRITON_DIR = "triton-cache"  # the child's TRITON_CACHE_DIR under its workdir (sandbox.child_env)
_MAX_KEY_BYTES = 512 * 2**20  # what one key may keep: a candidate cannot fill the disk
_MAX_FILE_BYTES = 64 * 2**20
_MAX_GROUP_BYTES = 2**20


def root() -> Path:
    from harness import device as device_mod

    return device_mod.cache_dir()


def cuda_ext_dir() -> Path:
    """Where CUDA C++ builds are kept (KF_COMPILE_CACHE of every child)."""
    return root() / "cuda-ext"


def screen_triton_dir() -> Path:
    """The Triton cache of the screen's trusted renders; never handed to a candidate sandbox."""
    return root() / "screen-triton"


def cache_key(candidate: Candidate, *, gpu: bool) -> str:
    """sha256 of what decides the compiled code: source, backend, device kind and versions."""
    parts = [
        CACHE_VERSION,
        str(candidate.backend),
        "cuda" if gpu else "interpreter",
        _version("torch"),
        _version("triton"),
        candidate.source,
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def key_dir(key: str) -> Path:
    return root() / "compile" / key


def seed_cache(workdir: Path, candidate: Candidate, *, gpu: bool) -> int:
    """Copy the candidate's own cached kernels into its scratch Triton cache; returns files.
    A cache that cannot be read is a cache miss, never a failed evaluation."""
    try:
        return _seed(workdir, candidate, gpu)
    except OSError:
        return 0


def keep_cache(workdir: Path, candidate: Candidate, *, gpu: bool) -> int:
    """After the child exited: add the files it compiled to its key; returns the key's files."""
    try:
        return _keep(workdir, candidate, gpu)
    except OSError:
        return 0


def _seed(workdir: Path, candidate: Candidate, gpu: bool) -> int:
    src = key_dir(cache_key(candidate, gpu=gpu)) / "triton"
    if not src.is_dir():
        return 0
    dest = Path(workdir) / TRITON_DIR
    count = 0
    for path, rel in _regular_files(src):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copyfile(path, target)
            count += 1
    _rewrite_groups(dest)
    return count


def _keep(workdir: Path, candidate: Candidate, gpu: bool) -> int:
    src = Path(workdir) / TRITON_DIR
    dest = key_dir(cache_key(candidate, gpu=gpu)) / "triton"
    if src.is_dir():
        total = sum(p.stat().st_size for p, _ in _regular_files(dest)) if dest.is_dir() else 0
        # Triton's group files last: a concurrent seed never sees a group before its files.
        files = sorted(_regular_files(src), key=lambda f: f[1].name.startswith("__grp__"))
        for path, rel in files:
            target = dest / rel
            if target.exists() or rel.parts[0].startswith("tmp."):
                continue
            size = path.lstat().st_size
            if size > _MAX_FILE_BYTES or total + size > _MAX_KEY_BYTES:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            # Written aside and renamed: a concurrent seed of the same key sees whole files only.
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}")
            try:
                _copy_no_follow(path, tmp)
                os.replace(tmp, target)
                total += size
            except OSError:
                with contextlib.suppress(OSError):
                    tmp.unlink()
    return sum(1 for _ in _regular_files(dest)) if dest.is_dir() else 0


def keep_cuda_builds(workdir: Path) -> None:
    """Copy fresh CUDA builds into the compile cache (keyed by source+flags hash)."""
    ext_root = Path(workdir) / "torch-extensions"
    if not ext_root.is_dir():
        return
    cache = cuda_ext_dir()
    for build in ext_root.iterdir():
        sos = list(build.glob("*.so"))
        target = cache / build.name
        if sos and not target.exists():
            with contextlib.suppress(OSError):  # another process kept the same build first
                target.mkdir(parents=True)
                for so in sos:
                    shutil.copy2(so, target / so.name)


def _regular_files(root: Path):
    """(path, relative path) of regular files under root; links and specials are skipped, so
    a child cannot make the parent copy something from outside its scratch folder."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not (base / d).is_symlink()]
        for name in filenames:
            path = base / name
            try:
                st = path.lstat()
            except OSError:
                continue
            if not path.is_symlink() and _is_regular(st.st_mode) and not name.startswith("."):
                yield path, path.relative_to(root)


def _is_regular(mode: int) -> bool:
    import stat

    return stat.S_ISREG(mode)


def _copy_no_follow(src: Path, dest: Path) -> None:
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        with os.fdopen(fd, "rb", closefd=False) as fin, open(dest, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    finally:
        os.close(fd)


def _rewrite_groups(dest: Path) -> None:
    """Triton's group files hold absolute paths to the kernel's files; point them here."""
    for group in dest.glob("*/__grp__*"):
        try:
            if group.is_symlink() or group.stat().st_size > _MAX_GROUP_BYTES:
                continue
            data = json.loads(group.read_text())
            paths = data.get("child_paths")
            if not isinstance(paths, dict):
                continue
            fixed = {}
            for name, path in paths.items():
                base = os.path.basename(str(path))
                if not base or base in (".", "..") or not (group.parent / base).is_file():
                    raise ValueError(f"group names a missing file {base!r}")
                fixed[str(name)] = str(group.parent / base)
            group.write_text(json.dumps({"child_paths": fixed}))
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                group.unlink()  # a broken group is a cache miss, never an error


def count_files(key: str) -> int:
    root = key_dir(key) / "triton"
    return sum(1 for _ in _regular_files(root)) if root.is_dir() else 0


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""
