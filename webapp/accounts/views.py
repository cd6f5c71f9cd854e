"""Sign-up, teams and invitations. Thin: forms validate, services write, selectors read."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.accounts import selectors, services
from webapp.accounts.forms import SignupForm, TeamForm
from webapp.accounts.models import Invitation, Membership


def signup(request: HttpRequest) -> HttpResponse:
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, "Welcome! Create a team or open an invitation link to join one.")
        return redirect("accounts:teams")
    return render(request, "accounts/signup.html", {"form": form})


@login_required
def teams(request: HttpRequest) -> HttpResponse:
    form = TeamForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        team = services.team_create(user=request.user, name=form.cleaned_data["name"])
        messages.success(request, f"Team “{team.name}” created.")
        return redirect("accounts:team", slug=team.slug)
    return render(
        request,
        "accounts/teams.html",
        {"form": form, "teams": selectors.teams_for_user(user=request.user)},
    )


@login_required
def team_detail(request: HttpRequest, slug: str) -> HttpResponse:
    membership = _membership_or_404(request, slug)
    team = membership.team
    invitations = []
    if membership.role == Membership.Role.OWNER:
        invitations = [
            (inv, request.build_absolute_uri(reverse("accounts:invitation", args=[inv.token])))
            for inv in selectors.invitations_open(team=team)
        ]
    return render(
        request,
        "accounts/team_detail.html",
        {
            "team": team,
            "membership": membership,
            "members": selectors.team_members(team=team),
            "invitations": invitations,
        },
    )


@login_required
@require_POST
def invitation_new(request: HttpRequest, slug: str) -> HttpResponse:
    membership = _membership_or_404(request, slug)
    try:
        services.invitation_create(team=membership.team, by=request.user)
    except PermissionDenied as error:
        messages.error(request, str(error))
    else:
        messages.success(request, "Invitation link created: send it to the person you invite.")
    return redirect("accounts:team", slug=slug)


@login_required
def invitation(request: HttpRequest, token: str) -> HttpResponse:
    invite = Invitation.objects.filter(token=token).select_related("team").first()
    if invite is None:
        raise Http404("No such invitation")
    if request.method == "POST":
        try:
            services.invitation_accept(token=token, user=request.user)
        except ValidationError as error:
            messages.error(request, " ".join(error.messages))
            return redirect("accounts:teams")
        messages.success(request, f"You joined “{invite.team.name}”.")
        return redirect("accounts:team", slug=invite.team.slug)
    return render(request, "accounts/invitation.html", {"invitation": invite})


def _membership_or_404(request: HttpRequest, slug: str) -> Membership:
    membership = (
        Membership.objects.filter(user=request.user, team__slug=slug).select_related("team").first()
    )
    if membership is None:
        # 404, not 403: a team's existence is not shown to outsiders.
        raise Http404("No such team")
    return membership
