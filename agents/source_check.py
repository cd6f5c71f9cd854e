"""Checks on generated candidate source before any GPU time is spent on it.

These catch the cheap failures (no code block, syntax errors, no entry point) and the obvious
escapes (processes, threads, files, ctypes, reflection). They are a first filter only: the
harness's runtime checks in a separate process are the real defence (RELIABILITY.md 1).
"""

from __future__ import annotations

import ast
import re

ALLOWED_IMPORTS = frozenset(
    {
        "__future__",
        "torch",
        "triton",
        "math",
        "functools",
        "typing",
        "dataclasses",
        "itertools",
        "enum",
    }
)
FORBIDDEN_CALLS = frozenset(
    {
        "eval",
        "exec",
        "compile",
        "open",
        "__import__",
        "globals",
        "locals",
        "vars",
        "breakpoint",
        "input",
    }
)
_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def extract_code(reply: str) -> str:
    """The last fenced Python block of a reply, or the reply itself if it has no fence."""
    blocks = _FENCE.findall(reply)
    if blocks:
        return max(blocks, key=len).strip() + "\n"
    if "def run" in reply:
        return reply.strip() + "\n"
    raise ValueError("no ```python code block in the reply")


def check_source(source: str) -> None:
    """Raise ValueError saying what is wrong; return None when the source may be evaluated."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"syntax error at line {exc.lineno}: {exc.msg}") from None
    runs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
    if not runs:
        raise ValueError("the module defines no top-level run(*inputs, out)")
    names = {a.arg for a in runs[0].args.args + runs[0].args.kwonlyargs}
    if "out" not in names:
        raise ValueError(
            "run must take the output buffer as `out` and fill it (destination passing)"
        )
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            else:
                roots = [(node.module or "").split(".")[0]] if node.level == 0 else ["<relative>"]
            bad = [r for r in roots if r not in ALLOWED_IMPORTS]
            if bad:
                allowed = ", ".join(sorted(ALLOWED_IMPORTS - {"__future__"}))
                raise ValueError(
                    f"line {node.lineno}: import of {bad[0]!r} is not allowed (allowed: {allowed})"
                )
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_CALLS
        ):
            raise ValueError(f"line {node.lineno}: calling {node.func.id}() is not allowed")
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("__")
            and node.attr not in ("__init__",)
        ):
            raise ValueError(
                f"line {node.lineno}: dunder attribute access ({node.attr}) is not allowed"
            )
