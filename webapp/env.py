"""Tiny helpers for reading settings from the environment (settings are env-only)."""

from __future__ import annotations

import os
from pathlib import Path


def envstr(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value is None or value == "" else int(value)


def envfloat(name: str, default: float) -> float:
    value = os.environ.get(name)
    return default if value is None or value == "" else float(value)


def envlist(name: str, default: str = "") -> list[str]:
    return [part.strip() for part in envstr(name, default).split(",") if part.strip()]


def envsecret(name: str, *, fallback_file: Path) -> str:
    """NAME, else the contents of NAME_FILE, else a key generated once and kept in fallback_file.

    The generated key lets the embedded `up` run without setup while staying stable across
    restarts (sessions survive); production sets NAME or NAME_FILE.
    """
    if os.environ.get(name):
        return os.environ[name]
    if os.environ.get(f"{name}_FILE"):
        return Path(os.environ[f"{name}_FILE"]).read_text().strip()
    if fallback_file.exists():
        return fallback_file.read_text().strip()
    import secrets

    fallback_file.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    fallback_file.write_text(key)
    fallback_file.chmod(0o600)
    return key
