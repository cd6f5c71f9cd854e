"""The API-token settings page: create (the token is shown once) and revoke. Thin (P1)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_POST

from webapp.accounts.selectors import teams_for_user
from webapp.api import selectors, services
from webapp.api.errors import ApiError, ErrorCode, error_response
from webapp.api.forms import TokenForm

# Post/redirect/get: the new token waits in the session for the one page view that shows it,
# so a reload shows it no more and creates nothing (issue 17).
NEW_TOKEN_KEY = "kf_new_token"


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        teams = list(form.cleaned_data["teams"]) or None
        token, raw = services.token_create(
            user=request.user, name=form.cleaned_data["name"], teams=teams
        )
        request.session[NEW_TOKEN_KEY] = raw
        messages.success(request, f"Token “{token.name}” created. Copy it now: it is shown once.")
        return redirect("api_tokens")
    created = request.session.pop(NEW_TOKEN_KEY, None) if request.method == "GET" else None
    response = render(
        request,
        "api/tokens.html",
        {
            "form": form,
            "created": created,
            "tokens": selectors.tokens_for_user(user=request.user),
            "teams": teams_for_user(user=request.user),
        },
        status=400 if form.errors else 200,
    )
    if created:
        add_never_cache_headers(response)  # no cache keeps a copy of the page with the token
    return response


def api_not_found(request: HttpRequest) -> HttpResponse:
    """An unknown path under /api/: a script gets the JSON error it parses everywhere else."""
    return error_response(
        ApiError(
            ErrorCode.NOT_FOUND,
            f"No API endpoint at {request.path}: the endpoints are listed at /api/docs.",
        )
    )


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    if services.token_revoke(user=request.user, token_id=token_id):
        messages.success(request, "Token revoked: requests with it are refused from now on.")
    return redirect("api_tokens")
