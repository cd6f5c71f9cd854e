"""Bits shared by the route modules: the error responses each operation declares."""

from __future__ import annotations

from django.http import HttpRequest

from webapp.api.schemas import ErrorOut
from webapp.api.selectors import Principal

# Declared on every operation so the OpenAPI schema lists what a client must handle.
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 413: ErrorOut, 422: ErrorOut}


def principal(request: HttpRequest) -> Principal:
    return request.auth  # type: ignore[attr-defined]  # set by TokenAuth
