"""The HTTP client: JSON requests with a bearer token, multipart uploads, the event stream.

Standard library only (urllib), so the CLI adds nothing but tqdm to a CI image.
"""

from __future__ import annotations

import json
import mimetypes
import secrets
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kforge.sse import Event, parse_events

API = "/api/v1"


class ApiError(Exception):
    """The server answered with an error: `code` is the API's stable error code."""

    def __init__(self, status: int, code: str, message: str, details: list | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or []


class Unreachable(Exception):
    """No answer: the server is down, the network failed, or it answered garbage."""


class Client:
    def __init__(self, base_url: str, token: str, *, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    # --- endpoints

    def me(self) -> dict[str, Any]:
        return self._json("GET", "/me")

    def submit_shapes(self, *, team: str, shapes: str, fmt: str, title: str | None,
                      queue: str | None, gpu_minutes: int | None) -> dict[str, Any]:  # fmt: skip
        body = {"team": team, "shapes": shapes, "format": fmt, "title": title, "queue": queue,
                "gpu_minutes": gpu_minutes}  # fmt: skip
        return self._json("POST", "/jobs", {k: v for k, v in body.items() if v is not None})

    def submit_model(self, *, team: str, path: Path, title: str | None,
                     gpu_minutes: int | None) -> dict[str, Any]:  # fmt: skip
        fields = {"team": team, "title": title, "gpu_minutes": gpu_minutes}
        body, content_type = _multipart(
            {k: str(v) for k, v in fields.items() if v is not None}, "model_file", path
        )
        return self._send("POST", "/jobs/model", body, content_type)

    def job(self, job_id: str) -> dict[str, Any]:
        return self._json("GET", f"/jobs/{_quote(job_id)}")

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", f"/jobs/{_quote(job_id)}/cancel")

    def download(self, job_id: str) -> bytes:
        with self._open("GET", f"/jobs/{_quote(job_id)}/download") as response:
            return response.read()

    def events(self, job_id: str, *, after: int = 0) -> Iterator[Event]:
        """The job's event stream from seq `after` on, until the server closes it."""
        path = f"/jobs/{_quote(job_id)}/events?after={after}"
        with self._open("GET", path, headers={"Accept": "text/event-stream"}) as response:
            yield from parse_events(response)

    # --- plumbing

    def _json(self, method: str, path: str, body: dict | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        return self._send(method, path, data, "application/json" if data else None)

    def _send(self, method: str, path: str, data: bytes | None, content_type: str | None) -> Any:
        headers = {"Content-Type": content_type} if content_type else {}
        with self._open(method, path, data=data, headers=headers) as response:
            try:
                return json.loads(response.read())
            except ValueError as error:
                raise Unreachable(f"{method} {path}: the answer is not JSON") from error

    def _open(self, method: str, path: str, *, data: bytes | None = None,
              headers: dict[str, str] | None = None):  # fmt: skip
        request = urllib.request.Request(
            self.base_url + API + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", **(headers or {})},
        )
        try:
            return urllib.request.urlopen(request, timeout=self.timeout_s)  # noqa: S310 (our URL)
        except urllib.error.HTTPError as error:
            raise _api_error(error) from None
        except (urllib.error.URLError, OSError) as error:
            raise Unreachable(f"cannot reach {self.base_url}: {error}") from None


def _api_error(error: urllib.error.HTTPError) -> Exception:
    try:
        body = json.loads(error.read())["error"]
        return ApiError(error.code, body["code"], body["message"], body.get("details"))
    except (ValueError, KeyError, TypeError):
        if error.code >= 500:
            return Unreachable(f"the server failed (HTTP {error.code})")
        return ApiError(error.code, "http_error", f"HTTP {error.code} {error.reason}")


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _multipart(fields: dict[str, str], file_field: str, path: Path) -> tuple[bytes, str]:
    boundary = "kforge-" + secrets.token_hex(16)
    parts = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        )
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; '
        f'filename="{path.name}"\r\nContent-Type: {mime}\r\n\r\n'
    )
    parts += [head.encode(), path.read_bytes(), b"\r\n", f"--{boundary}--\r\n".encode()]
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"
