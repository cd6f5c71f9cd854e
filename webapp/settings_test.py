"""Settings for pytest: the real PostgreSQL and Redis on this machine, kept apart from `up`.

pytest-django turns the database name into test_kernelforge. Redis db 15 and its own channel
prefix keep test traffic away from a running `up`. Each default can be overridden by the same
environment variable, which is how the SQLite path is tested (DATABASE_URL=sqlite:///...).
"""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/kernelforge")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("KF_CHANNELS_PREFIX", "kf-test")
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

# Two test runs on one machine share Redis db 15; give each run's Celery queues their own key
# prefix (named after its test database) so one run's worker never takes another run's tasks.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    **CELERY_BROKER_TRANSPORT_OPTIONS,  # noqa: F405
    "global_keyprefix": f"kf-test-{os.environ.get('KF_TEST_DATABASE_NAME', 'default')}:",
}
