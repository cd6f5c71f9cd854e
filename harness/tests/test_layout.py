"""harness/ along its trust boundary: no module reaches into another's private names, and the
parent side (evaluation, precompile, compile_cache) and the child side (the phases) do not
import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1]
PARENT = {"evaluation", "precompile", "compile_cache", "screen"}
CHILD = {"phases", "oracle_phases", "candidate_phases", "screen_child", "compiling"}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every `from harness.X import ...` in the file, nested ones too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        module = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
        if isinstance(node, ast.ImportFrom) and module.startswith("harness."):
            found.append((module.removeprefix("harness."), [a.name for a in node.names]))
        elif isinstance(node, ast.ImportFrom) and node.module == "harness":
            found += [(a.name, []) for a in node.names]
    return found


def test_no_harness_module_imports_another_ones_private_names():
    offenders = []
    for path in HARNESS.rglob("*.py"):  # the sandbox/ and model/ packages too
        if "tests" in path.relative_to(HARNESS).parts:
            continue
        for module, names in _imports(path):
            private = [n for n in names if n.startswith("_")]
            if private:
                where = path.relative_to(HARNESS)
                offenders.append(f"{where}: from harness.{module} import {private}")
    assert offenders == []


def test_the_parent_side_does_not_import_the_phases():
    for name in PARENT:
        imported = {module for module, _ in _imports(HARNESS / f"{name}.py")}
        assert not imported & CHILD, f"{name}.py imports {imported & CHILD}"
