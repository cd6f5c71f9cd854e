"""Load a candidate's source as a module, the way a harness would (kernels' own tests use it).

Triton's @jit reads a kernel's source with `inspect`, so a candidate must live in a real file;
we write each source once to a private temporary folder keyed by its content hash. The folder
is made on first use (not at import: every process that imports the ops would leave one) and
removed when the interpreter exits.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

_folders: dict[int, Path] = {}  # per process: a forked child makes (and removes) its own


def _folder() -> Path:
    pid = os.getpid()
    if pid not in _folders:
        _folders[pid] = Path(tempfile.mkdtemp(prefix="kf_candidates_"))
        atexit.register(_remove, pid)
    return _folders[pid]


def _remove(pid: int) -> None:
    if os.getpid() == pid:
        shutil.rmtree(_folders[pid], ignore_errors=True)


def load_module(source: str, name: str = "candidate") -> ModuleType:
    """Import `source` as a fresh module; the same text gives the same file (compile cache)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    module_name = f"kf_{name}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = _folder() / f"{module_name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    if not callable(getattr(module, "run", None)):
        raise ImportError("candidate module defines no run(*inputs, out)")
    return module
