"""Bearer-token authentication: `Authorization: Bearer kf_...` -> a Principal on request.auth."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer

from webapp.api import selectors, services
from webapp.api.errors import ApiError, ErrorCode


class TokenAuth(HttpBearer):
    openapi_description = (
        "An API token from /settings/tokens/, sent as `Authorization: Bearer kf_…`."
    )

    def __call__(self, request: HttpRequest) -> selectors.Principal:
        principal = super().__call__(request)
        if principal is None:
            # No header at all, or not a Bearer one: the same 401 shape as a bad token.
            raise ApiError(
                ErrorCode.NOT_AUTHENTICATED, "Send an API token: Authorization: Bearer kf_…"
            )
        return principal

    def authenticate(self, request: HttpRequest, token: str) -> selectors.Principal:
        return selectors.principal_for_token(token=services.token_authenticate(raw=token))
