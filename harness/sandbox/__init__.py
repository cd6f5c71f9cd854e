"""The sandbox: the mechanism that keeps every child in its own small world (harness/README.md,
"Sandbox per child"). Parent side: parent.py (run_child), process.py (start one child),
view.py (its bubblewrap view and namespaces), spares.py (warm children), cgroups.py,
scratch.py (temporary folders), scrub.py (secret values out of returned text). Child side,
standard library only: boot.py (lock down, run one phase), landlock.py, capabilities.py,
seccomp.py. protocol.py types what crosses between them.

What runs where is decided above this package (harness.phases.is_untrusted): a phase that
runs untrusted code gets an unprivileged uid, no host folder to write and no result key.

The parent-side names below load on first use: a child imports this package on its way to
boot.py and needs none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.sandbox.parent import ChildResult, ChildStatus, prestart, run_child
    from harness.sandbox.protocol import IsolationRecord
    from harness.sandbox.view import REPO_ROOT

__all__ = [
    "REPO_ROOT",
    "ChildResult",
    "ChildStatus",
    "IsolationRecord",
    "prestart",
    "run_child",
]
_HOME = {
    "ChildResult": "parent",
    "ChildStatus": "parent",
    "prestart": "parent",
    "run_child": "parent",
    "REPO_ROOT": "view",
    "IsolationRecord": "protocol",
}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f"harness.sandbox.{_HOME[name]}"), name)
    raise AttributeError(f"module 'harness.sandbox' has no attribute {name!r}")
