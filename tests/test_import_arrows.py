"""Imports point one way: kernels <- harness <- agents <- workers -> webapp (ARCHITECTURE.md).

benchmarks/ (the benchmark, the model-job CLI, acceptance-run tools) sits on top: it may use
kernels, harness and agents, and none of them, nor webapp, imports it.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# package -> top-level modules it must never import
FORBIDDEN = {
    "kernels": {
        "django",
        "celery",
        "channels",
        "webapp",
        "workers",
        "agents",
        "harness",
        "litellm",
        "benchmarks",
    },
    "harness": {
        "django",
        "celery",
        "channels",
        "webapp",
        "workers",
        "agents",
        "litellm",
        "benchmarks",
    },
    "agents": {"django", "celery", "channels", "webapp", "workers", "benchmarks"},
    "webapp": {"agents", "harness", "benchmarks"},
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", "") == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            roots.add(str(node.args[0].value).split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_it_keeps_the_import_arrows(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no Python files"
    bad = []
    for path in files:
        wrong = imported_roots(path) & FORBIDDEN[package]
        if wrong:
            bad.append(f"{path.relative_to(ROOT)} imports {sorted(wrong)}")
    assert not bad, "\n".join(bad)


def test_it_detects_a_forbidden_import(tmp_path):
    planted = tmp_path / "bad.py"
    planted.write_text("import django.db\nfrom celery import shared_task\n")
    assert {"django", "celery"} <= imported_roots(planted)
