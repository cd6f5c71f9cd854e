"""The NinjaAPI instance: v1 routes, bearer-token auth, and one JSON error shape for everything.

Served under /api/: the interactive docs at /api/docs, the OpenAPI schema at
/api/openapi.json, the endpoints at /api/v1/....
"""

from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, JsonResponse
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError

from webapp.api.auth import TokenAuth
from webapp.api.errors import ApiError, ErrorCode, error_response, handle_api_error
from webapp.api.routes import account, jobs, leaderboard

log = logging.getLogger(__name__)

DESCRIPTION = """
Submit kernel-optimization jobs, follow them, and fetch the winning kernels.

**Authentication.** Create a token at `/settings/tokens/` and send it as
`Authorization: Bearer kf_…`. A token sees only its user's teams (or the subset it was
created for); anything else answers 404 as if it did not exist.

**Errors.** Every error is `{"error": {"code", "message", "details"}}`; branch on `code`
(stable), show `message` (may change).

**Events.** `GET /api/v1/jobs/{id}/events` is a server-sent-events stream (see that
operation); `kforge submit --wait` uses it.
"""

_HTTP_CODES = {
    400: ErrorCode.MALFORMED_REQUEST,
    401: ErrorCode.NOT_AUTHENTICATED,
    403: ErrorCode.PERMISSION_DENIED,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.REQUEST_TOO_LARGE,
}

api = NinjaAPI(
    title="KernelForge API",
    version="1",
    description=DESCRIPTION,
    auth=TokenAuth(),
    urls_namespace="api",
    docs_url="/docs",
    openapi_url="/openapi.json",
)
api.add_router("/v1/", account.router)
api.add_router("/v1/", jobs.router)
api.add_router("/v1/", leaderboard.router)
api.add_exception_handler(ApiError, handle_api_error)


@api.exception_handler(ValidationError)
def _validation(request: HttpRequest, exc: ValidationError) -> JsonResponse:
    details = [
        {"loc": list(e.get("loc", [])), "message": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors
    ]
    first = details[0] if details else {"loc": [], "message": "invalid request"}
    where = ".".join(str(part) for part in first["loc"][1:]) or "request"
    return error_response(
        ApiError(ErrorCode.VALIDATION_ERROR, f"{where}: {first['message']}", details)
    )


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> JsonResponse:
    code = _HTTP_CODES.get(exc.status_code, ErrorCode.MALFORMED_REQUEST)
    return error_response(ApiError(code, str(exc)))


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> JsonResponse:
    return error_response(ApiError(ErrorCode.NOT_FOUND, "Not found."))


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> JsonResponse:
    return error_response(ApiError(ErrorCode.REQUEST_TOO_LARGE, str(exc)))


@api.exception_handler(Exception)
def _unexpected(request: HttpRequest, exc: Exception) -> JsonResponse:
    log.exception("API error on %s %s", request.method, request.path)
    return error_response(ApiError(ErrorCode.INTERNAL_ERROR, "Internal server error."))
