"""Model files in the KernelBench convention, checked without running them.

A model file is Python source defining `class Model(nn.Module)`, `get_inputs()` and
`get_init_inputs()`; the harness builds `Model(*get_init_inputs())` and calls it on
`get_inputs()`. This module only reads the source (ast), so the web app can reject a file that
does not follow the convention at upload time; whether it imports and runs is found out in the
harness's sandbox. `read_bundle` turns one file, a folder or a zip of KernelBench level-1/2
problem files into named sources, with bounded extraction (count, sizes, no path traversal).
"""

from __future__ import annotations

import ast
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

REQUIRED_FUNCTIONS = ("get_inputs", "get_init_inputs")
MAX_SOURCE_BYTES = 1 * 2**20  # one model file
MAX_BUNDLE_FILES = 200  # model files taken from one zip or folder
MAX_BUNDLE_BYTES = 20 * 2**20  # all of them, uncompressed
MAX_ZIP_MEMBERS = 2000  # entries of any kind a zip may list (a zip bomb lists millions)


class ModelSourceError(ValueError):
    """The file does not follow the convention; the message is shown to the user as is."""


@dataclass(frozen=True)
class ModelSource:
    name: str  # file name, e.g. "19_ReLU.py"
    text: str

    @property
    def title(self) -> str:
        return PurePosixPath(self.name).stem


def check_model_source(text: str, name: str = "model.py") -> ModelSource:
    """Raise ModelSourceError unless `text` parses and defines Model, get_inputs, get_init_inputs."""
    if len(text.encode()) > MAX_SOURCE_BYTES:
        raise ModelSourceError(f"{name}: larger than {MAX_SOURCE_BYTES // 1024} KiB")
    try:
        tree = ast.parse(text, filename=name)
    except SyntaxError as exc:
        raise ModelSourceError(f"{name}: not valid Python (line {exc.lineno}: {exc.msg})") from None
    defined = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    }
    problems = []
    model = defined.get("Model")
    if not isinstance(model, ast.ClassDef):
        problems.append("a class Model(nn.Module)")
    for fn in REQUIRED_FUNCTIONS:
        if not isinstance(defined.get(fn), ast.FunctionDef):
            problems.append(f"a function {fn}()")
    if problems:
        raise ModelSourceError(
            f"{name}: the KernelBench convention needs {', '.join(problems)} at module level"
        )
    return ModelSource(name=PurePosixPath(name).name, text=text)


def read_bundle(path: str | Path, *, data: bytes | None = None) -> list[ModelSource]:
    """Model sources from one .py file, a folder of them, or a .zip (data: the zip's bytes).

    Files that are not model files (helpers, __init__.py) are skipped in folders and zips; a
    bundle with no model file at all is an error, as is one over the count or size limits.
    """
    path = Path(path)
    if path.suffix == ".zip" or data is not None:
        return _read_zip(data if data is not None else path.read_bytes(), path.name)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.py") if p.is_file() and not p.is_symlink())
        return _collect(
            ((p.relative_to(path).as_posix(), p.read_bytes()) for p in files), path.name
        )
    return [check_model_source(_decode(path.read_bytes(), path.name), path.name)]


def _read_zip(data: bytes, label: str) -> list[ModelSource]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise ModelSourceError(f"{label}: not a zip file") from None
    infos = archive.infolist()
    if len(infos) > MAX_ZIP_MEMBERS:
        raise ModelSourceError(f"{label}: more than {MAX_ZIP_MEMBERS} entries")
    members = []
    for info in infos:
        name = info.filename
        parts = PurePosixPath(name.replace("\\", "/")).parts
        if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
            raise ModelSourceError(f"{label}: entry {name!r} points outside the archive")
        if info.is_dir() or not name.endswith(".py") or "__MACOSX" in parts:
            continue
        if info.file_size > MAX_SOURCE_BYTES:
            raise ModelSourceError(f"{label}: {name} is larger than {MAX_SOURCE_BYTES // 1024} KiB")
        members.append(info)
    if sum(i.file_size for i in members) > MAX_BUNDLE_BYTES:
        raise ModelSourceError(f"{label}: more than {MAX_BUNDLE_BYTES // 2**20} MiB of Python")

    def contents():
        for info in members:
            # Read at most the declared size + 1: a header that lies about its size is caught.
            with archive.open(info) as f:
                body = f.read(info.file_size + 1)
            if len(body) > info.file_size:
                raise ModelSourceError(f"{label}: {info.filename} is larger than it declares")
            yield info.filename, body

    return _collect(contents(), label)


def _collect(entries, label: str) -> list[ModelSource]:
    found: list[ModelSource] = []
    errors: list[str] = []
    total = 0
    for name, body in entries:
        total += len(body)
        if total > MAX_BUNDLE_BYTES:
            raise ModelSourceError(f"{label}: more than {MAX_BUNDLE_BYTES // 2**20} MiB of Python")
        try:
            found.append(check_model_source(_decode(body, name), name))
        except ModelSourceError as exc:
            errors.append(str(exc))
        if len(found) > MAX_BUNDLE_FILES:
            raise ModelSourceError(f"{label}: more than {MAX_BUNDLE_FILES} model files")
    if not found:
        detail = f" ({'; '.join(errors[:3])})" if errors else ""
        raise ModelSourceError(f"{label}: no file in the KernelBench convention{detail}")
    return found


def _decode(body: bytes, name: str) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelSourceError(f"{name}: not UTF-8 text") from None
