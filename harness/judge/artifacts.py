"""What the judge keeps from untrusted children: content-addressed, written only by us.

A sandboxed child never writes anything the parent keeps: it has no host folder to write
(its scratch is a private tmpfs that dies with it). What it produces (a recording's plans,
their cubins, precompiled files) comes back inside its result message; the parent hashes
every blob itself and stores it under that sha256 (`put`), and files the recorded plans under
a key it computes from the source it sent, the shapes it asked for and the versions that
decide the compiled code (`plans_key`). A child can therefore never write an entry for
another source, nor plant a link or a device file. Whoever loads a blob reads it without
following links, with a size cap, and hashes it again (`read`): a changed file is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_BLOB_BYTES = 256 * 2**20
STORE_VERSION = "kf-artifacts-v1"
_SHA = re.compile(r"^[0-9a-f]{64}$")


class ArtifactError(RuntimeError):
    pass


def store() -> Path:
    from harness import device as device_mod

    return device_mod.cache_dir() / "artifacts"


def put(root: str | Path, data: bytes) -> str:
    """Keep `data` under its sha256 (computed here); returns the sha."""
    if len(data) > MAX_BLOB_BYTES:
        raise ArtifactError(f"a blob of {len(data)} bytes is over the {MAX_BLOB_BYTES} cap")
    sha = hashlib.sha256(data).hexdigest()
    path = _path(root, sha)
    if path.is_file() and not path.is_symlink():
        return sha
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{sha}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return sha


def read(root: str | Path, sha: str) -> bytes:
    """The blob, hashed again; ArtifactError if it is missing, a link, too big or changed."""
    if not _SHA.match(sha):
        raise ArtifactError(f"not a sha256: {sha!r:.80}")
    path = _path(root, sha)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ArtifactError(f"artifact {sha[:12]} is not in the store: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ArtifactError(f"artifact {sha[:12]} is not a regular file")
        data = f.read(MAX_BLOB_BYTES + 1)
    if len(data) > MAX_BLOB_BYTES or hashlib.sha256(data).hexdigest() != sha:
        raise ArtifactError(f"artifact {sha[:12]} does not match its hash: refused")
    return data


def _path(root: str | Path, sha: str) -> Path:
    return Path(root) / "blobs" / sha[:2] / sha


def plans_key(source: str, problems: list[dict[str, Any]], device: str) -> str:
    """What decides a recording: the source, the shapes, the device and the versions of what
    compiles it (torch, triton; nvcc through the device's toolkit)."""
    parts = [
        STORE_VERSION,
        device,
        _version("torch"),
        _version("triton"),
        json.dumps(problems, sort_keys=True),
        source,
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def save_plans(root: str | Path, key: str, plans: list[dict[str, Any]]) -> None:
    folder = Path(root) / "plans"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{key}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(plans))
    os.replace(tmp, folder / f"{key}.json")


def load_plans(root: str | Path, key: str) -> list[dict[str, Any]] | None:
    """Recorded plans of this key (decoded again by Plan.from_json where they are used)."""
    path = Path(root) / "plans" / f"{key}.json"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd) as f:
        data = json.load(f)
    return data if isinstance(data, list) else None


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""
