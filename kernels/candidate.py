"""Load a candidate's source as a module, the way a harness would (kernels' own tests use it).

Triton's @jit reads a kernel's source with `inspect`, so a candidate must live in a real file;
we write each source once to a private temporary folder keyed by its content hash.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType

_DIR = Path(tempfile.mkdtemp(prefix="kf_candidates_"))


def load_module(source: str, name: str = "candidate") -> ModuleType:
    """Import `source` as a fresh module; the same text gives the same file (compile cache)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    module_name = f"kf_{name}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    path = _DIR / f"{module_name}.py"
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
