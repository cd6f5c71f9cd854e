"""Inside webapp, apps depend on the jobs app one way: the API, the dashboard and the downloads
read and write through webapp.jobs; webapp.jobs' models, services and selectors know none of
them (issue 18: model jobs joined the jobs app instead of the two importing each other)."""

import ast
from pathlib import Path

import pytest

WEBAPP = Path(__file__).resolve().parents[2]

# module (relative to webapp/) -> webapp packages it must never import
FORBIDDEN = {
    "jobs": {"webapp.api", "webapp.dashboard", "webapp.downloads"},
    "dashboard": {"webapp.api"},
    "downloads": {"webapp.api", "webapp.dashboard"},
}
# Pages compose several apps' reads; only the layers below them must stay one-way.
PAGES = {"views.py", "urls.py"}


def webapp_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(".".join(node.module.split(".")[:2]))
        elif isinstance(node, ast.Import):
            found.update(".".join(alias.name.split(".")[:2]) for alias in node.names)
    return {name for name in found if name.startswith("webapp.")}


@pytest.mark.parametrize("app", sorted(FORBIDDEN))
def test_the_app_depends_on_the_others_one_way(app):
    bad = []
    for path in sorted((WEBAPP / app).rglob("*.py")):
        if path.name in PAGES or "tests" in path.parts:
            continue
        wrong = webapp_imports(path) & FORBIDDEN[app]
        if wrong:
            bad.append(f"{path.relative_to(WEBAPP)} imports {sorted(wrong)}")
    assert not bad, "\n".join(bad)


def test_there_is_one_jobs_app():
    assert not (WEBAPP / "modeljobs").exists(), "model jobs live in webapp/jobs"
