"""The embedded database: the same service and view tests, re-run on a SQLite file.

The main run uses PostgreSQL; `up` defaults to SQLite, whose locking differs (one writer at a
time), so the seq allocation and compare-and-set transitions are checked there too.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_it_passes_the_service_and_view_tests_on_sqlite(tmp_path):
    env = dict(
        os.environ, DATABASE_URL=f"sqlite:///{tmp_path / 'kf.sqlite3'}", KF_VAR_DIR=str(tmp_path)
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "webapp/jobs/tests/test_services.py", "webapp/jobs/tests/test_views.py", "webapp/accounts"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
