"""Settings for pytest: the real PostgreSQL and Redis on this machine, kept apart from `up`.

pytest-django turns the database name into test_kernelforge. Redis db 15 and its own channel
prefix keep test traffic away from a running `up`. Each default can be overridden by the same
environment variable, which is how the SQLite path is tested (DATABASE_URL=sqlite:///...).
"""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/kernelforge")
# Two test runs on one machine (say, a fresh clone beside the work tree) share Redis db 15:
# everything this run keeps there is under its own prefix, named after its test database, so
# one run's worker never takes another run's tasks and one run's clean-up (conftest.py) never
# deletes another run's queues.
KF_TEST_RUN = os.environ.get("KF_TEST_DATABASE_NAME", "default")
KF_TEST_REDIS_PREFIX = f"kf-test-{KF_TEST_RUN}:"

os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("KF_CHANNELS_PREFIX", KF_TEST_REDIS_PREFIX + "channels")
os.environ.setdefault("KF_AGENT", "standin")  # tests that need the real graph say so
os.environ.setdefault("KF_STANDIN_ITERATIONS", "4")
os.environ.setdefault("KF_STANDIN_PAUSE_S", "0.05")

from webapp.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed only

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # A file, as `up` uses, not the shared-cache memory database: concurrent writers then meet
    # the same locking (WAL, BEGIN IMMEDIATE, busy timeout) as in the embedded product.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-kernelforge.sqlite3")}  # noqa: F405
elif os.environ.get("KF_TEST_DATABASE_NAME"):
    # Two test runs on one machine (say, a fresh clone beside the work tree) would otherwise
    # both create and drop test_kernelforge under each other.
    DATABASES["default"]["TEST"] = {"NAME": os.environ["KF_TEST_DATABASE_NAME"]}  # noqa: F405

CELERY_BROKER_TRANSPORT_OPTIONS = {
    **CELERY_BROKER_TRANSPORT_OPTIONS,  # noqa: F405
    "global_keyprefix": KF_TEST_REDIS_PREFIX,
}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {
    **CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS,  # noqa: F405
    "global_keyprefix": KF_TEST_REDIS_PREFIX,
}
