"""Django settings: env-only. Every knob is an environment variable; defaults give the embedded `up`.

The README's "Configuration" section lists the variables. Celery's settings follow
RELIABILITY.md section 4 (long GPU jobs); the channel layer follows section 5.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from webapp.env import envbool, envfloat, envint, envlist, envsecret, envstr

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("KF_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = envbool("KF_DEBUG", False)
SECRET_KEY = envsecret("KF_SECRET_KEY", fallback_file=VAR_DIR / "secret_key")
ALLOWED_HOSTS = envlist("KF_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = envlist("KF_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "daphne",  # first, so `runserver` is the ASGI one
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",  # naturaltime: "just now", not "0 minutes ago"
    "channels",
    "webapp.accounts",
    "webapp.jobs",  # jobs of shape sets and models (profile, Amdahl plan, end-to-end check)
    "webapp.embedded",
    "ninja",  # serves the API docs' assets locally (no CDN)
    "webapp.api",
    "webapp.dashboard",  # iteration, compare, leaderboard pages and downloads (issue 7)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "webapp.api.middleware.api_request_limits",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database: DATABASE_URL (PostgreSQL in production), else a SQLite file under var/.
DATABASES = {
    "default": dj_database_url.parse(
        envstr("DATABASE_URL", f"sqlite:///{VAR_DIR / 'kernelforge.sqlite3'}"),
        conn_max_age=envint("KF_DB_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web, workers and heartbeat threads write concurrently: WAL lets readers proceed, IMMEDIATE
    # takes the write lock at BEGIN (no upgrade deadlocks), and the timeout waits for it.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "jobs:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# No separate web server in the embedded setup or the compose file: the ASGI app serves /static/.
KF_SERVE_STATIC = envbool("KF_SERVE_STATIC", True)
MEDIA_ROOT = Path(envstr("KF_MEDIA_ROOT", str(VAR_DIR / "media")))

# --- Uploads and job limits (bad input gets a message on the form; nothing is half-made).
KF_MAX_SHAPE_FILE_BYTES = envint("KF_MAX_SHAPE_FILE_BYTES", 256 * 1024)
# A model is source text (a KernelBench .py, or a .zip of them): a few kB to a few MB.
KF_MAX_MODEL_FILE_BYTES = envint("KF_MAX_MODEL_FILE_BYTES", 32 * 1024 * 1024)
KF_MAX_PROBLEMS_PER_JOB = envint("KF_MAX_PROBLEMS_PER_JOB", 64)
# The largest request body the web server accepts at all (a model upload with its form
# fields). webapp/server.py refuses a larger declared Content-Length before reading the body,
# and cuts off a body without one at this size: daphne hands the application a whole body at
# once, in memory, so this also bounds the server's memory per request.
KF_MAX_REQUEST_BYTES = KF_MAX_MODEL_FILE_BYTES + 64 * 1024
# Django streams uploads above this to a temporary file instead of memory; the ASGI handler
# spools the body the same way (SpooledTemporaryFile of this size).
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024

# --- REST API (webapp/api): per-team quotas and request limits; errors carry stable codes.
KF_API_MAX_BODY_BYTES = envint("KF_API_MAX_BODY_BYTES", 1024 * 1024)  # JSON bodies
KF_TEAM_MAX_ACTIVE_JOBS = envint("KF_TEAM_MAX_ACTIVE_JOBS", 4)
KF_TEAM_GPU_MINUTES = envint("KF_TEAM_GPU_MINUTES", 6000)  # per rolling window
KF_TEAM_GPU_WINDOW_DAYS = envint("KF_TEAM_GPU_WINDOW_DAYS", 30)
KF_JOB_DEFAULT_GPU_MINUTES = envint("KF_JOB_DEFAULT_GPU_MINUTES", 30)
# The default on the CPU queue: one interpreter worker serves every team there, and a 30-minute
# form job held it for ~20 minutes while later jobs waited (issue 27); a CPU run checks
# correctness, which a few minutes show (a 256x256x256 matmul's search plateaued in 99 s).
KF_CPU_JOB_DEFAULT_MINUTES = envint("KF_CPU_JOB_DEFAULT_MINUTES", 5)
# The least budget a problem of a shape set may get (webapp/jobs/submission.budget_minutes): the
# search keeps one full verification back from the start (~55 s) and needs screen rounds
# besides; at 60 s a problem got no search at all (8 problems in 8 GPU-minutes, 2x H200,
# 2026-11-26). The default budget grows to give every problem this much.
KF_MIN_PROBLEM_GPU_MINUTES = envfloat("KF_MIN_PROBLEM_GPU_MINUTES", 2.0)
# What the job page shows LLM spend against (the agent enforces its own caps).
KF_JOB_LLM_BUDGET_USD = envfloat("KF_JOB_LLM_BUDGET_USD", 5.0)
# Event streams (webapp/api/events.py; issue 28): pushed from the channel layer. A token, and
# an address, may hold only so many at once (429 past that, per web process); a stream closes
# (event `timeout`, the client reconnects) after KF_API_SSE_IDLE_S without an event; a silent
# one sends a keep-alive, and re-reads the database once, every KF_API_SSE_KEEPALIVE_S.
KF_API_SSE_MAX_PER_TOKEN = envint("KF_API_SSE_MAX_PER_TOKEN", 20)
KF_API_SSE_MAX_PER_IP = envint("KF_API_SSE_MAX_PER_IP", 100)
KF_API_SSE_IDLE_S = envfloat("KF_API_SSE_IDLE_S", 300.0)
KF_API_SSE_KEEPALIVE_S = envfloat("KF_API_SSE_KEEPALIVE_S", 15.0)

# --- Redis: broker and channel layer. The test settings use another db and prefix.
REDIS_URL = envstr("REDIS_URL", "redis://127.0.0.1:6379/0")
KF_CHANNELS_PREFIX = envstr("KF_CHANNELS_PREFIX", "kf-channels")

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [REDIS_URL],
            "prefix": KF_CHANNELS_PREFIX,
            "expiry": 60,
            # Above daphne's websocket timeout (24 h by default), per R5.6.
            "group_expiry": 86400,
            "capacity": 500,
        },
    }
}

# --- Celery (R4.1-R4.7). Settings are read by workers/celery.py with namespace "CELERY".
# Queues: one per GPU model ("gpu.h100", ...), "cpu" for the interpreter worker, and "control"
# for short housekeeping (the watchdog) and the CPU jobs' model checks, served by a worker of
# its own (`up` and docker/compose.yml always start one) so it never waits behind a long
# optimization. A GPU job's model check must time on its GPU: it is sent to the GPU's queue at
# a higher priority than optimizations (Redis serves priority 0 first), so it runs next.
KF_QUEUES = envlist("KF_QUEUES", "cpu")
KF_CONTROL_QUEUE = "control"
KF_CHECK_PRIORITY = 0
KF_OPTIMIZE_PRIORITY = 6
KF_TASK_TIME_LIMIT_S = envint("KF_TASK_TIME_LIMIT_S", 6 * 3600)
KF_TASK_SOFT_TIME_LIMIT_S = envint("KF_TASK_SOFT_TIME_LIMIT_S", KF_TASK_TIME_LIMIT_S - 300)
# Redelivery of an unacked message after a lost worker: longer than the longest task, or a
# still-running task would be executed twice (celery #5306, #5935).
KF_VISIBILITY_TIMEOUT_S = envint("KF_VISIBILITY_TIMEOUT_S", KF_TASK_TIME_LIMIT_S + 1800)
# Liveness of a running task is a heartbeat in the database; the watchdog re-queues tasks whose
# heartbeat stopped (R4.7) instead of waiting out the visibility timeout.
KF_HEARTBEAT_S = envfloat("KF_HEARTBEAT_S", 15.0)
KF_HEARTBEAT_STALE_S = envfloat("KF_HEARTBEAT_STALE_S", 120.0)
KF_WATCHDOG_INTERVAL_S = envfloat("KF_WATCHDOG_INTERVAL_S", 60.0)
KF_TASK_MAX_ATTEMPTS = envint("KF_TASK_MAX_ATTEMPTS", 3)
# The stand-in agent (agents/standin.py) until the real graph is switched in.
# Which agent runs tasks: "graph" (agents.optimize) or "standin" (fast, for tests).
KF_AGENT = envstr("KF_AGENT", "graph")
if KF_AGENT not in ("graph", "standin"):
    raise ValueError("KF_AGENT must be 'graph' or 'standin'")
# LangGraph checkpoints live in the project database; on SQLite a sibling file keeps the
# checkpointer's frequent writes from contending with Django's for the one write lock.
_db = DATABASES["default"]
KF_CHECKPOINT_URL = envstr(
    "KF_CHECKPOINT_URL",
    f"sqlite:///{VAR_DIR / 'checkpoints.sqlite3'}"
    if _db["ENGINE"] == "django.db.backends.sqlite3"
    else envstr("DATABASE_URL", ""),
)
KF_STANDIN_ITERATIONS = envint("KF_STANDIN_ITERATIONS", 12)
KF_STANDIN_PAUSE_S = envfloat("KF_STANDIN_PAUSE_S", 1.0)

if KF_TASK_SOFT_TIME_LIMIT_S >= KF_TASK_TIME_LIMIT_S:
    raise ValueError("KF_TASK_SOFT_TIME_LIMIT_S must be below KF_TASK_TIME_LIMIT_S")
if KF_VISIBILITY_TIMEOUT_S <= KF_TASK_TIME_LIMIT_S:
    raise ValueError("KF_VISIBILITY_TIMEOUT_S must exceed KF_TASK_TIME_LIMIT_S")

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_RESULT_EXPIRES = 24 * 3600  # results live in our models; the backend is a convenience
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_REJECT_ON_WORKER_LOST = False  # a lost task comes back through the watchdog
CELERY_TASK_TRACK_STARTED = True
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT = envfloat("KF_WORKER_SOFT_SHUTDOWN_S", 30.0)
# `up` restarts a process that exits on its own; one that exits this many times in a row, each
# soon after starting, is given up on (and `up` stops).
KF_UP_MAX_QUICK_CRASHES = envint("KF_UP_MAX_QUICK_CRASHES", 5)
CELERY_TASK_TIME_LIMIT = KF_TASK_TIME_LIMIT_S
CELERY_TASK_SOFT_TIME_LIMIT = KF_TASK_SOFT_TIME_LIMIT_S
CELERY_VISIBILITY_TIMEOUT = KF_VISIBILITY_TIMEOUT_S
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": KF_VISIBILITY_TIMEOUT_S}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"visibility_timeout": KF_VISIBILITY_TIMEOUT_S}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_TASK_ROUTES = {"workers.watchdog": {"queue": KF_CONTROL_QUEUE}}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE = {
    "watchdog": {"task": "workers.watchdog", "schedule": KF_WATCHDOG_INTERVAL_S},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("KF_LOG_LEVEL", "INFO")},
    "loggers": {"daphne": {"level": "WARNING"}, "django.channels.server": {"level": "WARNING"}},
}
