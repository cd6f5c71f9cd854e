"""Static screening of candidate source (R1.10): findings are stored and shown; the strict ones
(threads, lazy tensors, timer patching) reject. Runtime checks run regardless, because a
pattern list is never complete."""

from __future__ import annotations

import ast
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
        r"(functools\.(lru_)?cache|@cache\b)",
        "caches results",
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
    keyed = address_key(source)
    if keyed is not None and not any(f.check == "static:caching" for f in found):
        line, text = keyed
        found.append(
            Finding(
                "static:caching",
                "warn",
                f"line {line}: {text!r}: keeps or compares a tensor address (result replay)",
            )
        )
    if forbid_vendor_library and op == "matmul":
        m = re.search(r"(torch\.(matmul|mm|bmm|addmm|einsum)|F\.linear|\s@\s|cublas)", source)
        if m:
            line = source.count("\n", 0, m.start()) + 1
            found.append(
                Finding("static:vendor_library", "warn", f"line {line}: {m.group(0).strip()!r}")
            )
    return found


# Reading a tensor's address is how every kernel launch gets its pointers, and how a replay
# cheat recognises "the same inputs again" (CUDA-L1's cache keyed on data_ptr()). The two
# differ in what is done with the address: host code passes it to a kernel or tests its
# alignment; a replay keeps it (a key, a stored value) or compares it with a kept one.
_PTR = re.compile(r"[\w\])]+\s*(?:\.|->)\s*data_ptr\s*(?:<[^<>()]*>)?\s*\(\s*\)")
_ALIGNMENT_AFTER = re.compile(r"\s*%\s*(?:2|4|8|16|32|64|128|256)(?![\w.*])")
_CPP_KEY_AFTER = re.compile(r"\s*(?:[=!]=|\])")
_CPP_KEY_BEFORE = re.compile(
    r"(?:[=!]=|\[|\b(?:find|count|emplace|try_emplace|insert|at)\s*\()\s*$"
)


def address_key(source: str) -> tuple[int, str] | None:
    """(line, text) of the first tensor address a candidate keeps or compares, else None.

    Allowed: `x.data_ptr() % 16` (an alignment test) in Python; in C++ (the string constants
    a CUDA candidate compiles), addresses passed to a kernel or cast to a pointer. Flagged:
    in Python any other use (a key, a comparison, a stored value); in C++ a comparison or a
    map key. A source that is not Python is read as C++ throughout.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return _cpp_address_key(source, first_line=1)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found = _cpp_address_key(node.value, first_line=node.lineno)
            if found is not None:
                return found
    lines = source.splitlines()
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "data_ptr"
        ):
            continue
        rest = lines[node.end_lineno - 1][node.end_col_offset :] if node.end_lineno else ""
        if node.lineno != node.end_lineno or not _ALIGNMENT_AFTER.match(rest):
            return node.lineno, ast.get_source_segment(source, node) or "data_ptr()"
    return None


def _cpp_address_key(text: str, *, first_line: int) -> tuple[int, str] | None:
    for m in _PTR.finditer(text):
        after, before = text[m.end() :], text[: m.start()]
        if _ALIGNMENT_AFTER.match(after):
            continue
        if _CPP_KEY_AFTER.match(after) or _CPP_KEY_BEFORE.search(before):
            return first_line + text.count("\n", 0, m.start()), m.group(0)
    return None
