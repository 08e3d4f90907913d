"""The token page's inputs; refusals name the field and the value."""

from __future__ import annotations

from django import forms

from costapp.api.tokens import MAX_LIFETIME_DAYS
from costapp.forms import NamedErrors
from costapp.models.api import TOKEN_SCOPES


class TokenCreateForm(NamedErrors, forms.Form):
    name = forms.CharField(max_length=100, strip=True)
    scopes = forms.MultipleChoiceField(
        choices=TOKEN_SCOPES, widget=forms.CheckboxSelectMultiple, initial=["api"]
    )
    days = forms.IntegerField(
        min_value=1, max_value=MAX_LIFETIME_DAYS, initial=90,
        label="Expires after (days)",
    )  # fmt: skip


class TokenRevokeForm(NamedErrors, forms.Form):
    revoke = forms.IntegerField(min_value=1, max_value=2**62)
