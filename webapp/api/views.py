"""The API-token settings page: create (the token is shown once) and revoke. Thin (P1)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.api import selectors, services
from webapp.api.forms import TokenForm


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST or None, user=request.user)
    created = None
    if request.method == "POST" and form.is_valid():
        teams = list(form.cleaned_data["teams"]) or None
        token, created = services.token_create(
            user=request.user, name=form.cleaned_data["name"], teams=teams
        )
        form = TokenForm(user=request.user)
        messages.success(request, f"Token “{token.name}” created. Copy it now: it is shown once.")
    return render(
        request,
        "api/tokens.html",
        {
            "form": form,
            "created": created,
            "tokens": selectors.tokens_for_user(user=request.user),
        },
        status=400 if form.errors else 200,
    )


@login_required
@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    if services.token_revoke(user=request.user, token_id=token_id):
        messages.success(request, "Token revoked: requests with it are refused from now on.")
    return redirect("api_tokens")
