import uuid

import pytest

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_TEST_DB = "kf_agents_test"


@pytest.fixture(scope="session")
def postgres_url():
    """A real PostgreSQL database for checkpoints (the project database's engine)."""
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (PG_TEST_DB,)
        ).fetchone()
        if not exists:
            conn.execute(f"CREATE DATABASE {PG_TEST_DB}")
    return f"postgresql://postgres@127.0.0.1:5432/{PG_TEST_DB}"


@pytest.fixture(params=["sqlite", "postgres"])
def checkpoint_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'checkpoints.sqlite3'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def thread_id():
    return f"test-{uuid.uuid4().hex[:12]}"
