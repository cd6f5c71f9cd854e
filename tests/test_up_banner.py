"""`make up`'s banner (URL, demo login, the kforge line) is the last thing it prints, after the
workers' own start-up output, and a run that is root on purpose does not get Celery's
superuser warning at every start (issue 27, item 8)."""

from __future__ import annotations

import re

import pytest
from test_up_in_a_browser import up  # noqa: F401  (fixture)

from webapp.embedded.workers import WorkerSpec, intentionally_root, worker_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def allow_root(monkeypatch):
    monkeypatch.setenv("KF_ALLOW_ROOT", "1")


def test_the_banner_comes_after_the_workers_output(allow_root, up):  # noqa: F811
    out = up["output"]()
    banner = out.index("KernelForge is up")
    ready = [m.start() for m in re.finditer(r"(cpu|control)@\S+ ready\.", out)]
    assert len(ready) == 2 and max(ready) < banner, out
    assert "SecurityWarning" not in out and "superuser privileges" not in out


def test_only_a_run_that_is_root_on_purpose_sets_the_warning_aside():
    assert intentionally_root(euid=0, allow="1")
    assert not intentionally_root(euid=1000, allow="1")
    spec = WorkerSpec(name="w", node="w@%h", queues=("cpu",), env={"A": "1"})
    quiet = worker_env({"PYTHONWARNINGS": "default"}, spec, quiet_root=True)
    assert quiet["PYTHONWARNINGS"].startswith("default,ignore:You're running the worker")
    assert "PYTHONWARNINGS" not in worker_env({}, spec, quiet_root=False)
