"""Opening a CUTLASS family's shared library from a probe with ctypes: its entry point's C
signature, kf_workspace_size's and the two strings every family exports (kf_last_error,
kf_describe). The probes call a build directly, outside the harness, to time it beside others."""

from __future__ import annotations

import ctypes
from pathlib import Path

PTR, INT, INT64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64


def open_build(path: Path, entry: str, argtypes: list, workspace_ints: int) -> ctypes.CDLL:
    """entry's argtypes (returning an int error code) and kf_workspace_size's int count."""
    lib = ctypes.CDLL(str(path))
    getattr(lib, entry).argtypes = argtypes
    getattr(lib, entry).restype = INT
    lib.kf_workspace_size.argtypes = [INT] * workspace_ints
    lib.kf_workspace_size.restype = INT64
    lib.kf_last_error.restype = ctypes.c_char_p
    lib.kf_describe.restype = ctypes.c_char_p
    return lib
