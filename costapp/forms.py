"""The one base of every form of the product (``NamedErrors``; ``NamedForm``
and ``NamedModelForm`` for short): the admin's, the pages', the login's.

It carries three rules, so that no form has its own:

- every field error names the field and the value the user sent,
  ``name='value': reason`` (the value cut to 80 characters, as everywhere:
  ``analytics.errors.shown``), however the template shows it
  (``form.as_p``, ``{{ field.errors }}``, or ``form.messages()`` for flash
  messages). Django's own messages ("This field is required.") say neither;
  a user who pasted a 10 kB string or a stray NUL byte needs both;
- no NUL byte in any field (PostgreSQL text cannot hold one). It replaces
  Django's ``ProhibitNullCharactersValidator``, which names neither and
  speaks before the field's own check (a date field says "is not a date");
- by field kind, decided from the widget:

  - one-line text (a ``CharField`` drawn as any input but a textarea): a
    name of something, an address, a selector. ``validation.name_problem``
    refuses C0/C1 controls (tab, CR and LF included), U+2028/U+2029 and the
    bidi overrides and isolates: a line break in a channel name was a header
    of its own in an email ("a\\r\\nBcc: x");
  - free text (a textarea, or a field named in ``free_text_fields``: a
    description, a list one item a line): tab, CR and LF are kept
    (``validation.free_text_problem``);
  - secret (a password input, or a field named in ``secret_fields``): only
    the NUL rule; its value is never shown, not on the page, not in its
    source (``password: reason``);
  - anything else (choices, numbers, dates, files): the NUL rule; its own
    parsing refuses the rest.

A field's own refusal comes first; these rules speak when it has none. A
refused value is dropped from ``cleaned_data``, so ``clean()`` never sees it.
A message that names its field already (``name='x': ...``, or the fleet
file's ``name 'x' ...``) is kept as it is.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import NON_FIELD_ERRORS
from django.core.validators import ProhibitNullCharactersValidator

from analytics.errors import shown
from costapp.validation import free_text_problem, name_problem

# What a checkbox sends (or a hidden boolean), on or off; anything else is junk.
CHECKED = (None, True, False, "", "on", "1", "true", "True", "0", "false", "False")
NUL = "contains a NUL byte"


class NamedErrors(forms.BaseForm):
    """Mixin for ``forms.Form``, ``forms.ModelForm`` and Django's own forms
    (``AuthenticationForm``): the product's input rules (module docstring)."""

    secret_fields: tuple[str, ...] = ()
    free_text_fields: tuple[str, ...] = ()

    def full_clean(self) -> None:
        if self.is_bound:
            for field in self.fields.values():
                if isinstance(field, forms.CharField):
                    # Replaced by the rule below, which names the field and
                    # lets the field's own check speak first.
                    field.validators = [
                        v
                        for v in field.validators
                        if not isinstance(v, ProhibitNullCharactersValidator)
                    ]
        super().full_clean()
        self.reasons: dict[tuple[str, str], str] = {}
        if not self.is_bound:
            return
        errors = self.errors  # cleaned by now: this does not clean again
        for name in list(errors):
            if name == NON_FIELD_ERRORS:
                continue
            head = self.error_head(name)
            named = []
            for said in map(str, errors[name]):
                # A message that names its field already (``name=...``, or
                # the fleet file's ``name ...``) is kept as it is.
                if said.startswith((f"{name}=", f"{name} ", f"{head}: ")):
                    named.append(said)
                else:
                    named.append(f"{head}: {said}")
                    self.reasons[(name, named[-1])] = said
            errors[name] = self.error_class(named, renderer=self.renderer)

    def reason(self, name: str, error: str) -> str:
        """``error`` of field ``name`` as its field or check said it, without
        the name and value this base put before it."""
        return getattr(self, "reasons", {}).get((name, error), error)

    def _clean_fields(self) -> None:
        super()._clean_fields()  # type: ignore[misc]
        for name, reason in self._refusals().items():
            if not self.has_error(name):
                self.cleaned_data.pop(name, None)
                self.add_error(name, reason)

    def _refusals(self) -> dict[str, str]:
        """Why each field's value as sent is refused by the product's rules."""
        refused: dict[str, str] = {}
        for name, field in self.fields.items():
            if field.disabled:
                continue
            if isinstance(field, forms.BooleanField) and not isinstance(
                field, forms.NullBooleanField
            ):
                if self.data.get(self.add_prefix(name)) not in CHECKED:
                    refused[name] = "a checkbox is on or off"
                continue
            kind = self.field_kind(name, field)
            for text in _texts(self[name].data):
                if kind == "name":
                    problem = name_problem(text)
                elif kind == "free text":
                    problem = free_text_problem(text)
                else:
                    problem = NUL if "\x00" in text else None
                if problem:
                    refused[name] = problem
                    break
        return refused

    def field_kind(self, name: str, field: forms.Field) -> str:
        """``secret``, ``free text``, ``name`` (one-line text) or ``other``."""
        if self.is_secret(name):
            return "secret"
        if not isinstance(field, forms.CharField):
            return "other"
        if name in self.free_text_fields or isinstance(field.widget, forms.Textarea):
            return "free text"
        return "name"

    def is_secret(self, name: str) -> bool:
        field = self.fields.get(name)
        widget = field.widget if field is not None else None
        return name in self.secret_fields or isinstance(widget, forms.PasswordInput)

    def error_head(self, name: str) -> str:
        """What each error of ``name`` starts with: ``name='value'`` (a
        secret: ``name``)."""
        if self.is_secret(name):
            return name
        return f"{name}={shown(self._raw_value(name))}"

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


def _texts(value: Any) -> list[str]:
    """The strings a widget read from the request (a multi-select's list,
    a split date-time's parts)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str)]
    return []


class NamedForm(NamedErrors, forms.Form):
    """A ``forms.Form`` of the product."""


class NamedModelForm(NamedErrors, forms.ModelForm):
    """A ``forms.ModelForm`` of the product (the admin's forms among them)."""


class LoginForm(NamedErrors, AuthenticationForm):
    """Django's login form with its field errors named like every other
    form's. The password is named, never shown: not on the page, not in its
    source."""

    secret_fields = ("password",)
