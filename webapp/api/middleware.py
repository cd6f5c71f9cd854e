"""Reject API requests with a body we do not take, before anything parses them.

413: JSON bodies are small (a shape set is at most KF_MAX_SHAPE_FILE_BYTES); only the multipart
model upload may be large. The web server (webapp/server.py) has already refused anything over
KF_MAX_REQUEST_BYTES before reading it; this narrows the limit per kind of API request.

415: a body must say what it is: `application/json` (or multipart/form-data for the model
upload). The JSON endpoints parsed any body as JSON, so `text/plain` or no Content-Type at all
created jobs; a client that sends the wrong type learns it here, not from a surprise.
"""

from __future__ import annotations

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware

from webapp.api.errors import ApiError, ErrorCode, error_response

API_PREFIX = "/api/"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
MEDIA_TYPES = ("application/json", "multipart/form-data")


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
    content_type = request.META.get("CONTENT_TYPE", "")
    has_body = length > 0 or "HTTP_TRANSFER_ENCODING" in request.META
    if has_body and request.method in BODY_METHODS and not _accepted(content_type):
        sent = content_type or "no Content-Type"
        return error_response(
            ApiError(
                ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                f"The body is {sent}; send JSON with Content-Type: application/json "
                "(a model file: multipart/form-data).",
                [{"content_type": content_type, "accepted": list(MEDIA_TYPES)}],
            )
        )
    limit = body_limit(content_type)
    if length > limit:
        return error_response(
            ApiError(
                ErrorCode.REQUEST_TOO_LARGE,
                f"The request body is {length} bytes; the limit for this request is {limit}.",
                [{"limit_bytes": limit, "size_bytes": length}],
            )
        )
    return None


def _accepted(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type in MEDIA_TYPES or media_type.endswith("+json")
