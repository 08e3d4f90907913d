"""The one form base of the product (costapp/forms.py, issue 28): every form
derives from it, the admin's included, and it carries the named errors, the
NUL rule and the name rule, decided per field kind."""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django import forms
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import RequestFactory

import costapp
from costapp.forms import NamedErrors, NamedForm

ROOT = Path(__file__).resolve().parents[2]
HEADER = "a\r\nBcc: evil@example.com"


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_form_class_of_costapp_derives_from_the_one_base() -> None:
    for info in pkgutil.walk_packages(costapp.__path__, "costapp."):
        if ".migrations" not in info.name:
            importlib.import_module(info.name)
    found = {
        cls
        for cls in _subclasses(forms.BaseForm)
        if cls.__module__.startswith("costapp.")
    }
    assert len(found) >= 25, sorted(c.__qualname__ for c in found)
    outside = sorted(
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in found
        if not issubclass(cls, NamedErrors)
    )
    assert not outside, f"derive these from costapp.forms.NamedErrors: {outside}"


@pytest.mark.django_db
def test_every_admin_page_edits_through_the_one_base() -> None:
    request = RequestFactory().get("/admin/")
    request.user = User(username="root", is_superuser=True, is_staff=True)
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label not in ("costapp", "auth"):
            continue  # django-axes' read-only logs
        for change in (False, True):
            form = model_admin.get_form(request, None, change=change)
            assert issubclass(form, NamedErrors), (model.__name__, change, form)


def test_no_form_keeps_a_base_of_its_own() -> None:
    own = re.compile(r"class _Named\b|_NamedErrors")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in (ROOT / "costapp").rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if own.search(line)
    ]
    assert not found, found


class Sample(NamedForm):
    name = forms.CharField(max_length=100)
    note = forms.CharField(widget=forms.Textarea, required=False)
    pasted = forms.CharField(required=False)  # free text by name, below
    token = forms.CharField(widget=forms.PasswordInput, required=False)
    day = forms.DateField(required=False)
    kind = forms.ChoiceField(choices=[("a", "a")], required=False)
    on = forms.BooleanField(required=False)

    free_text_fields = ("pasted",)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        self.seen = dict(data)
        return data


def _errors(**data: str) -> dict[str, list[str]]:
    form = Sample({"name": "ok", **data})
    form.is_valid()
    return {name: list(errors) for name, errors in form.errors.items()}


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (HEADER, "name='a\\r\\nBcc: evil@example.com': contains a line break (U+000D)"),
        ("gpu\u2028x", "name='gpu\\u2028x': contains a line break (U+2028)"),
        ("gpu\u202etxt", "name='gpu\\u202etxt': contains a bidirectional control (U+202E)"),
        ("a\u2066b", "name='a\\u2066b': contains a bidirectional control (U+2066)"),
        ("a\tb", "name='a\\tb': contains a control character (U+0009)"),
        ("a\x85b", "name='a\\x85b': contains a control character (U+0085)"),
        ("a\x00b", "name='a\\x00b': contains a NUL byte"),
    ],
)  # fmt: skip
def test_a_one_line_field_refuses_line_breaks_controls_and_bidi_overrides(
    value: str, said: str
) -> None:
    assert _errors(name=value) == {"name": [said]}


def test_a_refused_value_never_reaches_clean() -> None:
    form = Sample({"name": HEADER, "note": "kept"})
    assert not form.is_valid()
    assert "name" not in form.seen and form.seen["note"] == "kept"


def test_free_text_keeps_tabs_and_line_breaks_but_not_other_controls() -> None:
    form = Sample({"name": "ok", "note": "one\r\ntwo\tthree", "pasted": "1\n2"})
    assert form.is_valid(), form.errors
    assert _errors(note="a\x1b[31m") == {
        "note": ["note='a\\x1b[31m': contains a control character (U+001B)"]
    }
    assert _errors(pasted="a\u202eb") == {
        "pasted": ["pasted='a\\u202eb': contains a bidirectional control (U+202E)"]
    }
    assert _errors(note="a\x00") == {"note": ["note='a\\x00': contains a NUL byte"]}


def test_a_secret_keeps_what_its_issuer_made_and_is_never_shown() -> None:
    assert _errors(token="se\r\ncret") == {}
    assert _errors(token="se\x00cret") == {"token": ["token: contains a NUL byte"]}


def test_a_field_s_own_refusal_speaks_before_the_nul_rule() -> None:
    assert _errors(day="2026-01-01\x00") == {
        "day": ["day='2026-01-01\\x00': Enter a valid date."]
    }
    (said,) = _errors(kind="a\x00")["kind"]
    assert said.startswith("kind='a\\x00': ")


def test_a_checkbox_is_on_or_off() -> None:
    assert _errors(on="maybe") == {"on": ["on='maybe': a checkbox is on or off"]}
    assert _errors(on="on") == {}
