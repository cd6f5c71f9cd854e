"""Use the Redis at REDIS_URL, or start a private one there when nothing answers."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from urllib.parse import urlparse

import redis

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def reachable(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2).ping())
    except (redis.RedisError, OSError):
        return False


def server_argv(url: str, *, data_dir: Path) -> list[str]:
    """redis-server arguments for a throwaway local Redis on REDIS_URL's port (nothing on disk)."""
    parsed = urlparse(url)
    host = parsed.hostname or "127.0.0.1"
    if host not in LOCAL_HOSTS:
        raise RuntimeError(
            f"no Redis answers at {url}, and {host} is not this machine, so `up` cannot start one"
        )
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError(
            "no Redis answers at REDIS_URL and redis-server is not installed (apt-get install redis-server)"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    bind = "127.0.0.1" if host != "::1" else "::1"
    return [
        exe, "--port", str(parsed.port or 6379), "--bind", bind, "--save", "", "--appendonly", "no",
        "--dir", str(data_dir), "--protected-mode", "yes",
        "--logfile", str(data_dir / "redis.log"), "--loglevel", "warning",
    ]  # fmt: skip


def wait_until_reachable(url: str, *, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if reachable(url):
            return True
        time.sleep(0.2)
    return False
