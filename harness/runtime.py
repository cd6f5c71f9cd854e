"""Inside a candidate's sandbox: load the module and call it under runtime anti-cheat checks.

Everything here runs in the untrusted process, so it can only detect, never prevent: the
references it compares against are captured before the candidate is imported, the results it
reports are judged by a trusted process, and what it cannot see (C-level patching) is covered by
the out-of-process checks (see harness/README.md, "What the sandbox cannot see").
"""

from __future__ import annotations

import _thread
import importlib.util
import sys
import threading
import time
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_active_count = threading.active_count
_enumerate = threading.enumerate
_count = _thread._count  # every thread of the _thread module, threading's or started raw


@dataclass(frozen=True)
class ThreadMark:
    """The Python threads alive at one moment, to tell which ones appeared since."""

    count: int
    alive: frozenset

    @classmethod
    def now(cls) -> ThreadMark:
        return cls(_count(), frozenset(_enumerate()))

    def new_since(self) -> list[str]:
        """Threads started since the mark and still running ("N unnamed" for raw ones)."""
        named = [t.name for t in _enumerate() if t not in self.alive and t.is_alive()]
        raw = _count() - self.count - len(named)
        return named + ([f"{raw} started with _thread"] if raw > 0 else [])


def load_candidate(source: str, workdir: str, name: str = "kf_candidate") -> types.ModuleType:
    """Import the candidate from a real file (Triton's @jit reads its source with inspect)."""
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


def _watched_namespaces() -> dict[str, Mapping[str, Any]]:
    # vars() of a class is a read-only mappingproxy, of a module its dict
    spaces: dict[str, Mapping[str, Any]] = {
        "time": vars(time),
        "torch": vars(torch),
        "torch.cuda": vars(torch.cuda),
        "torch.cuda.Event": vars(torch.cuda.Event),
        "torch.Tensor": vars(torch.Tensor),
        "torch._C.TensorBase": vars(torch._C.TensorBase),
        "torch.nn.functional": vars(torch.nn.functional),
        "threading": vars(threading),
    }
    for mod_name in ("triton", "triton.testing", "harness.timing", "harness.runtime"):
        mod = sys.modules.get(mod_name)
        if mod is not None:
            spaces[mod_name] = vars(mod)
    return spaces


class PatchWatch:
    """Identity snapshot of timer, torch and triton functions (R1.7's minimum, CUDA-L2 style)."""

    def __init__(self) -> None:
        self.spaces = _watched_namespaces()
        self.snapshot = {
            (space, name): id(value)
            for space, ns in self.spaces.items()
            for name, value in list(ns.items())
            if callable(value) or isinstance(value, types.ModuleType)
        }
        self.modules = {name: id(sys.modules.get(name)) for name in ("torch", "time", "triton")}

    def changed(self) -> list[str]:
        names = []
        for (space, name), ident in self.snapshot.items():
            value = self.spaces[space].get(name, None)
            if value is None or id(value) != ident:
                names.append(f"{space}.{name}")
        names += [
            f"sys.modules[{n!r}]" for n, i in self.modules.items() if id(sys.modules.get(n)) != i
        ]
        return names


@dataclass
class CallCheck:
    """What one guarded call revealed."""

    threads_before: int
    threads_after: int
    extra_threads: list[str]
    patched: list[str]
    returned: str  # "" for None (destination passing), else the type that came back
    out_type: str  # type(out) after the call: must still be torch.Tensor
    out_rebound: bool  # out no longer points at the harness's buffer
    returned_subclass: bool = False  # run() returned a torch.Tensor subclass (lazy output)

    def findings(self) -> list[dict]:
        found = []
        if self.extra_threads:
            found.append(
                _finding("thread", f"threads alive after run(): {', '.join(self.extra_threads)}")
            )
        if self.patched:
            shown = ", ".join(self.patched[:8])
            found.append(_finding("monkeypatch", f"replaced during run(): {shown}"))
        if self.returned and self.returned != "NoneType":
            lazy = self.returned_subclass
            found.append(
                _finding(
                    "lazy_output" if lazy else "returned_value",
                    f"run() returned a {self.returned}; it must fill `out` and return None",
                    "reject" if lazy else "warn",
                )
            )
        if self.out_type != "torch.Tensor":
            found.append(_finding("lazy_output", f"out became a {self.out_type}"))
        if self.out_rebound:
            found.append(_finding("output_rebound", "out was pointed at other storage"))
        return found


def _finding(check: str, detail: str, severity: str = "reject") -> dict:
    return {"check": check, "severity": severity, "detail": detail}


def _type_name(value: object) -> str:
    t = type(value)
    return "NoneType" if value is None else f"{t.__module__}.{t.__qualname__}"


def guarded_call(module, inputs, out, watch: PatchWatch, sync) -> CallCheck:
    before = set(_enumerate())
    n_before = _active_count()
    ptr = out.data_ptr()
    ret = module.run(*inputs, out=out)
    sync()
    n_after = _active_count()
    extra = [t.name for t in _enumerate() if t not in before and t.is_alive()]
    return CallCheck(
        threads_before=n_before,
        threads_after=n_after,
        extra_threads=extra,
        patched=watch.changed(),
        returned="" if ret is None else _type_name(ret),
        out_type=_type_name(out),
        out_rebound=out.data_ptr() != ptr,
        returned_subclass=isinstance(ret, torch.Tensor) and type(ret) is not torch.Tensor,
    )
