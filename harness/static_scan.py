"""Static screening of candidate source (R1.10): findings are stored and shown; the strict ones
(threads, lazy tensors, timer patching) reject. Runtime checks run regardless, because a
pattern list is never complete."""

from __future__ import annotations

import re

from harness.results import Finding

# (check, severity, pattern, what it means)
RULES: tuple[tuple[str, str, str, str], ...] = (
    (
        "static:thread",
        "reject",
        r"\b(import\s+threading|from\s+threading|import\s+multiprocessing|"
        r"from\s+multiprocessing|concurrent\.futures|_thread\b)",
        "threads or processes in a kernel module",
    ),
    (
        "static:lazy_output",
        "reject",
        r"(_make_subclass|__torch_function__|__torch_dispatch__|"
        r"\.__class__\s*=)",
        "tensor subclass or class swap (lazy output)",
    ),
    (
        "static:timer_patch",
        "reject",
        r"(\.\s*(elapsed_time|perf_counter(_ns)?|synchronize|record|"
        r"do_bench\w*|time|monotonic)\s*=(?!=)|setattr\(\s*(time|torch|triton))",
        "assignment to a timer or synchronize function",
    ),
    (
        "static:side_stream",
        "warn",
        r"(torch\.cuda\.Stream|cuda\.stream\(|cudaStreamCreate|"
        r"Stream\(\s*non_blocking)",
        "creates or switches CUDA streams",
    ),
    (
        "static:introspection",
        "warn",
        r"\b(gc\.get_objects|gc\.get_referrers|inspect\.stack|"
        r"sys\._getframe|f_back|f_globals)\b",
        "walks the interpreter's objects or frames",
    ),
    (
        "static:caching",
        "warn",
        r"(data_ptr\(\)|functools\.(lru_)?cache|@cache\b)",
        "keys on tensor addresses or caches results",
    ),
    (
        "static:environment",
        "warn",
        r"(os\.environ|getenv|subprocess|socket|urllib|requests\.)",
        "reads the environment, spawns processes or opens sockets",
    ),
    ("static:ctypes", "warn", r"\b(ctypes|cffi|mprotect|/proc/self)\b", "native memory access"),
)


def scan(source: str, *, forbid_vendor_library: bool = False, op: str = "") -> list[Finding]:
    found = []
    for check, severity, pattern, meaning in RULES:
        m = re.search(pattern, source)
        if m:
            line = source.count("\n", 0, m.start()) + 1
            found.append(
                Finding(check, severity, f"line {line}: {m.group(0).strip()!r}: {meaning}")
            )
    if forbid_vendor_library and op == "matmul":
        m = re.search(r"(torch\.(matmul|mm|bmm|addmm|einsum)|F\.linear|\s@\s|cublas)", source)
        if m:
            line = source.count("\n", 0, m.start()) + 1
            found.append(
                Finding("static:vendor_library", "warn", f"line {line}: {m.group(0).strip()!r}")
            )
    return found
