"""What the fuzz tests share (tests/foundation/test_fuzz_forms.py and
test_fuzz_queries.py, two files so that two workers run them at once): the
absurd values, the crawler that discovers forms, the world they run in, and
how an answer is judged."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.utils.html import escape

from costapp.models import CostLine
from tests.support.crawl import concrete, seed_url_objects, url_patterns

NESTED = "[" * 50 + "]" * 50
VALUES = [
    "1e309",
    "NaN",
    "-1",
    "1" + "0" * 30,
    "0001-01-01",
    "9999-12-31",
    "2026-13-45",
    "x" * 10_000,
    "a\x00b",
    # A line break is a header of its own in an email (issue 28); a bidi
    # override shows a name reordered, U+2028 breaks a line in JS and logs.
    "a\r\nBcc: evil@example.com",
    "gpu\u202etxt.exe\u2028x",
    "\uff11\uff12\uff13",  # full-width digits 123
    json.dumps({"a": {"b": {"c": [1, [2, [3]]]}}}),
    NESTED,
    "",
]
FILES = {
    "empty": b"",
    "binary": bytes(range(256)) * 8,
    "nested-json": ("[" * 5000 + "]" * 5000).encode(),
    "huge-int": ('{"x": ' + "9" * 5000 + "}").encode(),
    "nul": b"a,b\n\x00,1\n",
}
# Inputs typed as numbers or dates must refuse what is not one.
STRICT_TYPES = {"number", "date", "datetime-local"}
NOT_A_NUMBER = {"1e309", "NaN", "2026-13-45", "x" * 10_000, "a\x00b", NESTED}
# Routes whose forms are not ours to fuzz here: the admin site (Django's own)
# and the login form (throttled by django-axes; tests/foundation/test_login.py).
SKIP_PREFIXES = ("/admin/", "/login/", "/logout/")
LARGE_FORM = 20  # fields


@dataclass
class Form:
    page: str
    action: str
    method: str
    enctype: str
    fields: dict[str, str] = field(default_factory=dict)  # name -> default
    types: dict[str, str] = field(default_factory=dict)  # name -> input type
    files: list[str] = field(default_factory=list)


class FormParser(HTMLParser):
    def __init__(self, page: str) -> None:
        super().__init__()
        self.page = page
        self.forms: list[Form] = []
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append(
                Form(
                    self.page,
                    a.get("action") or self.page,
                    (a.get("method") or "get").lower(),
                    a.get("enctype", ""),
                )
            )
            return
        if not self.forms or not a.get("name"):
            return
        form, name = self.forms[-1], a["name"]
        if tag == "input":
            kind = a.get("type", "text").lower()
            if kind == "file":
                form.files.append(name)
            elif kind in {"checkbox", "radio"}:
                if "checked" in a:
                    form.fields[name] = a.get("value", "on")
                form.types[name] = kind
            elif kind not in {"submit", "button", "reset"}:
                form.fields[name] = a.get("value", "")
                form.types[name] = kind
        elif tag == "select":
            self._select = name
            form.fields.setdefault(name, "")
            form.types[name] = "select"
        elif tag == "option" and self._select:
            if "selected" in a or not form.fields.get(self._select):
                form.fields[self._select] = a.get("value", "")
        elif tag == "textarea":
            self._textarea = name
            form.fields[name] = ""
            form.types[name] = "textarea"

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea and self.forms:
            self.forms[-1].fields[self._textarea] += data


def discover_forms(client: Client, seeded: dict[str, str]) -> list[Form]:
    forms: list[Form] = []
    seen: set[tuple[str, str, tuple[str, ...]]] = set()
    for name, route in url_patterns():
        if name.startswith("admin:"):
            continue
        path = concrete(route, seeded)
        if path.startswith(SKIP_PREFIXES) or name in {"healthz", "readyz"}:
            continue
        response = client.get(path)
        if response.status_code != 200 or "html" not in response["Content-Type"]:
            continue
        parser = FormParser(path)
        parser.feed(response.content.decode())
        for form in parser.forms:
            action = urlsplit(form.action).path or path
            if action.startswith(SKIP_PREFIXES):
                continue
            form.action = action
            key = (action, form.method, tuple(sorted(form.fields) + form.files))
            if key not in seen:
                seen.add(key)
                forms.append(form)
    return forms


def submit(client: Client, form: Form, data: dict[str, object]) -> object:
    payload = {k: v for k, v in data.items() if v is not None}
    if form.method == "post":
        return client.post(form.action, payload)
    return client.get(form.action, payload)


def shown(value: str) -> str:
    """What a refusal must quote of the value: its repr without the opening
    quote, HTML-escaped; messages cut values to 80 characters, so only the
    first 59 are required."""
    return escape(repr(value)[1:-1][:59])


def names_field(body: str, name: str) -> bool:
    """Whether the page refuses this field (messages say ``name='value'``
    or ``Title (name) = 'value'``)."""
    return f"{name}=" in body or f"({name}) =" in body


def unnamed_errors(body: str) -> list[str]:
    """Field errors that name no field and value (Django's own wording)."""
    items = re.findall(r'<ul class="errorlist"[^>]*>(.*?)</ul>', body, flags=re.S)
    return [
        f"error names no field: {text.strip()[:80]!r}"
        for block in items
        for text in re.findall(r"<li>(.*?)</li>", block, flags=re.S)
        if "=" not in text
    ]


def refused(body: str) -> bool:
    return any(
        marker in body
        for marker in (
            'class="errorlist',
            'class="error',
            "cap-errors",
            'class="messages"',
        )
    )


def fuzz_world(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The objects every URL needs, a stored bill, and no way out."""
    # Forms that start work run it in-process here; nothing may leave the
    # machine, so AWS points at a closed loopback port and never at the
    # instance metadata service.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "fuzz")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fuzz")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    seeded = seed_url_objects()
    CostLine.objects.create(
        source="cost_explorer",
        account_id="123456789012",
        period_start=datetime(2026, 11, 1, tzinfo=UTC),
        granularity="day",
        fetched_at=datetime(2026, 11, 3, tzinfo=UTC),
        service="Amazon Elastic Compute Cloud - Compute",
        usage_type="BoxUsage:p5.48xlarge",
        amortized_cost=Decimal("1234.567890123456"),
        unblended_cost=Decimal("1234.567890123456"),
        currency="USD",
    )
    return seeded


def bill_snapshot() -> list[tuple[object, ...]]:
    return list(CostLine.objects.order_by("pk").values_list())
