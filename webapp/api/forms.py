"""The token form on the settings page: a name, and all teams or some of them."""

from __future__ import annotations

from django import forms
from django.contrib.auth.models import AbstractBaseUser

from webapp.accounts.selectors import teams_for_user


class TokenForm(forms.Form):
    name = forms.CharField(max_length=80, help_text="Where it is used, e.g. “CI of ml-models”.")
    teams = forms.ModelMultipleChoiceField(
        queryset=None,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Leave all unticked for every team you are in (now and later).",
    )

    def __init__(self, *args, user: AbstractBaseUser, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["teams"].queryset = teams_for_user(user=user)
