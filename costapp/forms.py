"""What every form of the product shares: errors that name the field and the
value the user sent, however the template shows them (``form.as_p``,
``{{ field.errors }}``, or ``form.messages()`` for flash messages).

Django's own messages ("This field is required.", "Null characters are not
allowed.") say neither; a user who pasted a 10 kB string or a stray NUL byte
needs both to find what to fix.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import NON_FIELD_ERRORS

from costapp.validation import shown


class NamedErrors(forms.BaseForm):
    """Mixin for ``forms.Form`` and ``forms.ModelForm``: after cleaning, each
    field error reads ``name='value': reason`` (the value cut to 80
    characters, as everywhere in the product); a field in ``secret_fields``
    reads ``name: reason``, its value never shown."""

    secret_fields: tuple[str, ...] = ()

    def full_clean(self) -> None:
        super().full_clean()
        if not self.is_bound:
            return
        errors = self.errors  # cleaned by now: this does not clean again
        for name in list(errors):
            if name == NON_FIELD_ERRORS:
                continue
            said = [str(error) for error in errors[name]]
            head = (
                name
                if name in self.secret_fields
                else f"{name}={shown(self._raw_value(name))}"
            )
            errors[name] = self.error_class(
                [e if e.startswith(f"{name}=") else f"{head}: {e}" for e in said],
                renderer=self.renderer,
            )

    def _raw_value(self, name: str) -> Any:
        key = self.add_prefix(name)
        upload = self.files.get(key)
        if upload is not None:
            return getattr(upload, "name", "")
        getlist = getattr(self.data, "getlist", None)
        if getlist is not None:
            values = getlist(key)
            return values[0] if len(values) == 1 else (values or "")
        return self.data.get(key, "")

    def messages(self) -> list[str]:
        """Every error as one sentence naming the field and the value."""
        return [str(error) for errors in self.errors.values() for error in errors]


class LoginForm(NamedErrors, AuthenticationForm):
    """Django's login form with its field errors named like every other
    form's. The password is named, never shown: not on the page, not in its
    source."""

    secret_fields = ("password",)
