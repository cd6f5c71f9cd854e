"""Defense in depth: the worker's secret values never leave the harness in a child's text.

A child gets an allow-listed environment and cannot see its parent's (PID namespace), but if
a layer were missing, a candidate that found a secret would print it, and its output is
stored and shown to the submitter. So every text a child returns (captured output, errors,
strings in its result) is scrubbed of the values of this process's secret-looking environment
variables before anything else sees it. This is the one rule for "secret-looking".
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote, urlsplit

# Variable names whose values are secrets: *_KEY, *_TOKEN, *_SECRET, anything with PASSWORD,
# SECRET or CREDENTIAL in it, and the connection URLs a worker holds.
_SECRET_NAME = re.compile(
    r"(_KEY|_TOKEN|_SECRET)$|PASSWORD|PASSWD|SECRET|CREDENTIAL|^(DATABASE|REDIS|BROKER|"
    r"CELERY_BROKER|CELERY_RESULT_BACKEND|AMQP|MONGO|SENTRY_DSN)(_URL)?$|_DSN$",
    re.IGNORECASE,
)
_MIN_LEN = 6  # shorter values (a "1", a port) would blank out ordinary text
REDACTED = "[redacted:{name}]"


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def secret_values(environ: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(value, variable name) pairs to hide, longest first; a URL's password counts alone too."""
    env = os.environ if environ is None else environ
    found: dict[str, str] = {}
    for name, value in env.items():
        parts = [value] if is_secret_name(name) else []
        password = _url_password(value)
        if password:  # a URL with credentials, whatever its variable is called
            parts += [password, unquote(password)]
        for part in parts:
            if len(part) >= _MIN_LEN:
                found.setdefault(part, name)
    return sorted(found.items(), key=lambda kv: -len(kv[0]))


def _url_password(value: str) -> str | None:
    if "://" not in value:
        return None
    try:
        return urlsplit(value).password
    except ValueError:
        return None


def scrub_text(text: str, secrets: list[tuple[str, str]] | None = None) -> str:
    for value, name in secret_values() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, REDACTED.format(name=name))
    return text


def scrub(obj: Any, secrets: list[tuple[str, str]] | None = None) -> Any:
    """The same for every string inside a JSON-like value (a child's result)."""
    secrets = secret_values() if secrets is None else secrets
    if not secrets:
        return obj
    if isinstance(obj, str):
        return scrub_text(obj, secrets)
    if isinstance(obj, dict):
        return {k: scrub(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub(v, secrets) for v in obj]
    return obj
