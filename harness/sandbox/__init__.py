"""The sandbox: the trust boundary between the harness and untrusted code (candidate kernels,
uploaded models). Parent side: parent.py (run_child), process.py (start one child),
spares.py (warm children), namespaces.py (which namespaces, the mount plan), cgroups.py,
scratch.py (temporary folders), scrub.py (secret values out of returned text). Child side,
standard library only: boot.py (lock down, run one phase), mounts.py, landlock.py,
capabilities.py, seccomp.py. protocol.py types what crosses between them. See
harness/README.md, "Sandbox per child".

The parent-side names below load on first use: a child imports this package on its way to
boot.py and needs none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.sandbox.parent import ChildResult, ChildStatus, run_child
    from harness.sandbox.process import REPO_ROOT
    from harness.sandbox.protocol import IsolationRecord

__all__ = ["REPO_ROOT", "ChildResult", "ChildStatus", "IsolationRecord", "run_child"]
_HOME = {
    "ChildResult": "parent",
    "ChildStatus": "parent",
    "run_child": "parent",
    "REPO_ROOT": "process",
    "IsolationRecord": "protocol",
}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f"harness.sandbox.{_HOME[name]}"), name)
    raise AttributeError(f"module 'harness.sandbox' has no attribute {name!r}")
