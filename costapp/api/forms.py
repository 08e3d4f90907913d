"""The token page's inputs; refusals name the field and the value."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from costapp.api.tokens import MAX_LIFETIME_DAYS
from costapp.forms import NamedForm
from costapp.models.api import TOKEN_SCOPES

PLAIN_INT = re.compile(r"[0-9]{1,19}")


class PlainIntegerField(forms.IntegerField):
    """Django's IntegerField calls int(), which also reads "3_0" and
    full-width digits; a lifetime is typed in ASCII digits."""

    def to_python(self, value: Any) -> int | None:
        if (
            isinstance(value, str)
            and value.strip()
            and not PLAIN_INT.fullmatch(value.strip())
        ):
            raise forms.ValidationError("is not a whole number (ASCII digits)")
        return super().to_python(value)


class TokenCreateForm(NamedForm):
    name = forms.CharField(max_length=100, strip=True)
    scopes = forms.MultipleChoiceField(
        choices=TOKEN_SCOPES, widget=forms.CheckboxSelectMultiple, initial=["api"]
    )
    days = PlainIntegerField(
        min_value=1, max_value=MAX_LIFETIME_DAYS, initial=90,
        label="Expires after (days)",
    )  # fmt: skip


class TokenRevokeForm(NamedForm):
    revoke = PlainIntegerField(min_value=1, max_value=2**62)
