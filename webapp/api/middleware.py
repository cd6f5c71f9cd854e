"""Reject oversized API requests before anything parses them (413 with a stable code).

JSON bodies are small (a shape set is at most KF_MAX_SHAPE_FILE_BYTES); only the multipart
model upload may be large. The web server (webapp/server.py) has already refused anything over
KF_MAX_REQUEST_BYTES before reading it; this narrows the limit per kind of API request.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

from webapp.api.errors import ApiError, ErrorCode, error_response

API_PREFIX = "/api/"


def body_limit(content_type: str) -> int:
    if content_type.startswith("multipart/form-data"):
        return settings.KF_MAX_REQUEST_BYTES
    return settings.KF_API_MAX_BODY_BYTES


@sync_and_async_middleware
def api_request_limits(get_response):
    # Both flavours, so the async event stream does not hop through a thread for this check.
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponse:
            rejected = _check(request) if request.path.startswith(API_PREFIX) else None
            return rejected if rejected is not None else await get_response(request)

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponse:
        rejected = _check(request) if request.path.startswith(API_PREFIX) else None
        return rejected if rejected is not None else get_response(request)

    return middleware


def _check(request: HttpRequest) -> HttpResponse | None:
    raw = request.META.get("CONTENT_LENGTH") or "0"
    try:
        length = int(raw)
    except ValueError:
        return error_response(
            ApiError(ErrorCode.MALFORMED_REQUEST, f"Content-Length {raw!r} is not a number.")
        )
    limit = body_limit(request.META.get("CONTENT_TYPE", ""))
    if length > limit:
        return error_response(
            ApiError(
                ErrorCode.REQUEST_TOO_LARGE,
                f"The request body is {length} bytes; the limit for this request is {limit}.",
                [{"limit_bytes": limit, "size_bytes": length}],
            )
        )
    return None
