"""Every API error is JSON `{"error": {"code", "message", "details"}}` with a stable `code`.

Clients (the kforge CLI, CI scripts) branch on `code`, never on the message text, so codes
are an enum and are never renamed; messages may improve freely.
"""

from __future__ import annotations

import enum
from http import HTTPStatus
from typing import Any

from django.http import HttpRequest, JsonResponse


class ErrorCode(enum.StrEnum):
    NOT_AUTHENTICATED = "not_authenticated"  # 401: no token, or not a token we issued
    TOKEN_REVOKED = "token_revoked"  # 401: the token was revoked on the settings page
    PERMISSION_DENIED = "permission_denied"  # 403: the token's scope excludes this team
    NOT_FOUND = "not_found"  # 404: no such object among what this token may see
    NO_WINNERS = "no_winners"  # 404: the job has no verified winning kernel (yet)
    METHOD_NOT_ALLOWED = "method_not_allowed"  # 405
    JOB_NOT_CANCELLABLE = "job_not_cancellable"  # 409: the job already ended
    REQUEST_TOO_LARGE = "request_too_large"  # 413
    REQUEST_URI_TOO_LONG = "request_uri_too_long"  # 414: the request line is over 16 KiB
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"  # 415: a body that is not JSON (multipart)
    REQUEST_HEADER_TOO_LARGE = "request_header_too_large"  # 431: headers over 16 KiB in all
    TOO_MANY_STREAMS = "too_many_streams"  # 429: this token or address has its streams open
    MALFORMED_REQUEST = "malformed_request"  # 400: body is not JSON / not multipart
    VALIDATION_ERROR = "validation_error"  # 422: a field has the wrong type, range or form
    UNKNOWN_TEAM = "unknown_team"  # 422: no team with that slug in the token's scope
    UNKNOWN_QUEUE = "unknown_queue"  # 422: no worker queue with that name
    INVALID_SHAPE_SET = "invalid_shape_set"  # 422: the shape set does not parse or validate
    INVALID_MODEL_FILE = "invalid_model_file"  # 422: wrong suffix, empty, or too large
    QUOTA_ACTIVE_JOBS = "quota_active_jobs"  # 429: the team has too many queued/running jobs
    QUOTA_GPU_MINUTES = "quota_gpu_minutes"  # 429: the team's GPU-minute quota is spent
    INTERNAL_ERROR = "internal_error"  # 500: a bug on our side (logged)


STATUS = {
    ErrorCode.NOT_AUTHENTICATED: HTTPStatus.UNAUTHORIZED,
    ErrorCode.TOKEN_REVOKED: HTTPStatus.UNAUTHORIZED,
    ErrorCode.PERMISSION_DENIED: HTTPStatus.FORBIDDEN,
    ErrorCode.NOT_FOUND: HTTPStatus.NOT_FOUND,
    ErrorCode.NO_WINNERS: HTTPStatus.NOT_FOUND,
    ErrorCode.METHOD_NOT_ALLOWED: HTTPStatus.METHOD_NOT_ALLOWED,
    ErrorCode.JOB_NOT_CANCELLABLE: HTTPStatus.CONFLICT,
    ErrorCode.REQUEST_TOO_LARGE: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    ErrorCode.REQUEST_URI_TOO_LONG: HTTPStatus.REQUEST_URI_TOO_LONG,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
    ErrorCode.REQUEST_HEADER_TOO_LARGE: HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
    ErrorCode.TOO_MANY_STREAMS: HTTPStatus.TOO_MANY_REQUESTS,
    ErrorCode.MALFORMED_REQUEST: HTTPStatus.BAD_REQUEST,
    ErrorCode.VALIDATION_ERROR: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.UNKNOWN_TEAM: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.UNKNOWN_QUEUE: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.INVALID_SHAPE_SET: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.INVALID_MODEL_FILE: HTTPStatus.UNPROCESSABLE_ENTITY,
    ErrorCode.QUOTA_ACTIVE_JOBS: HTTPStatus.TOO_MANY_REQUESTS,
    ErrorCode.QUOTA_GPU_MINUTES: HTTPStatus.TOO_MANY_REQUESTS,
    ErrorCode.INTERNAL_ERROR: HTTPStatus.INTERNAL_SERVER_ERROR,
}


class ApiError(Exception):
    """Raise anywhere under an API operation; the handler turns it into the JSON error."""

    def __init__(self, code: ErrorCode, message: str, details: list[Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or []

    @property
    def status(self) -> int:
        return int(STATUS[self.code])


def error_response(error: ApiError) -> JsonResponse:
    body = {"error": {"code": error.code.value, "message": error.message, "details": error.details}}
    response = JsonResponse(body, status=error.status)
    if error.status == HTTPStatus.UNAUTHORIZED:
        response["WWW-Authenticate"] = 'Bearer realm="kernelforge"'
    return response


def handle_api_error(request: HttpRequest, exc: ApiError) -> JsonResponse:
    return error_response(exc)
