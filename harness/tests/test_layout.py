"""harness/ along its trust boundary (harness/README.md): judge/ decides, sandbox/ is the
mechanism, child/ is the little that runs beside untrusted code. child/ never imports judge/
(not even through a module it imports), sandbox/ imports neither, only the judge's render
path imports a source, and no module reaches into another's private names."""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every `from harness.X import ...` / `import harness.X` in the file,
    nested ones too; `from harness import a, b` counts as harness.a and harness.b."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.startswith("harness."):
                found.append((module.removeprefix("harness."), [a.name for a in node.names]))
            elif module == "harness":
                found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [
                (a.name.removeprefix("harness."), [])
                for a in node.names
                if a.name.startswith("harness.")
            ]
    return found


def _file(module: str) -> Path | None:
    path = HARNESS / (module.replace(".", "/") + ".py")
    if path.is_file():
        return path
    package = HARNESS / module.replace(".", "/") / "__init__.py"
    return package if package.is_file() else None


def _closure(start: Path) -> set[str]:
    """Every harness module `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for module, names in _imports(todo.pop()):
            for candidate in (module, *(f"{module}.{n}" for n in names)):
                path = _file(candidate)
                if path is not None and candidate not in seen:
                    seen.add(candidate)
                    todo.append(path)
    return seen


def test_what_runs_beside_untrusted_code_never_imports_the_judge():
    for path in (HARNESS / "child").glob("*.py"):
        reached = sorted(m for m in _closure(path) if m == "judge" or m.startswith("judge."))
        assert reached == [], f"child/{path.name} reaches {reached}"


def test_the_sandbox_mechanism_imports_neither_side():
    for path in (HARNESS / "sandbox").glob("*.py"):
        for module, _ in _imports(path):
            assert not module.startswith(("judge", "child")), f"sandbox/{path.name}: {module}"


def test_only_the_judges_render_path_imports_source_text():
    """The judge imports a module only after trust.py matched it to a render of our own."""
    users = []
    for path in (HARNESS / "judge").glob("*.py"):
        if "load_candidate" in path.read_text():
            users.append(path.name)
    assert users == ["open.py"]
    text = (HARNESS / "judge" / "open.py").read_text()
    tree = ast.parse(text)
    [render] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_render"]
    body = ast.unparse(render)
    assert "load_candidate" in body and body.index("render(") < body.index("load_candidate")


def test_no_harness_module_imports_another_ones_private_names():
    offenders = []
    for path in HARNESS.rglob("*.py"):  # the sandbox/, judge/, child/ and model/ packages too
        if "tests" in path.relative_to(HARNESS).parts:
            continue
        for module, names in _imports(path):
            private = [n for n in names if n.startswith("_")]
            if private:
                where = path.relative_to(HARNESS)
                offenders.append(f"{where}: from harness.{module} import {private}")
    assert offenders == []
