"""Import a module from source text, the way Triton needs it (from a real file).

Used by the judge for renders of our own families, by the screen's children (renders too) and,
inside its sandbox, for an untrusted candidate (harness/child/). Triton's @jit reads a
kernel's source with `inspect`, so the module is written to the caller's folder first.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path


def load_candidate(source: str, workdir: str, name: str = "kf_candidate") -> types.ModuleType:
    """Import the module from a real file; it must define run(*inputs, out)."""
    path = Path(workdir) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the candidate from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if not callable(getattr(module, "run", None)):
        raise AttributeError("candidate module defines no run(*inputs, out)")
    return module
