"""Absurd input into every form, query parameter and file field.

Forms are discovered by crawling: every ``<form>`` on every page an admin can
open (admins see every form), so a new form is fuzzed without editing this
file. Each answer is a 4xx, a redirect, or a 200 that either accepted the value
or names the field and the value it refused; never a 500. Afterwards no run is
left "running" and the bill stored before is unchanged.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils.html import escape

from costapp.models import CostLine, IngestRun
from tests.support.crawl import concrete, seed_url_objects, url_patterns
from tests.support.users import user_in

# Not in the SQLite smoke subset: three minutes, and the forms are the same.
pytestmark = [pytest.mark.django_db]

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


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
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


def test_every_form_refuses_absurd_input_by_name_and_never_fails(
    world: dict[str, str],
) -> None:
    # A server error is a finding to list, not an exception to stop at.
    client = Client(raise_request_exception=False)
    client.force_login(user_in("fuzzer", "admin"))
    forms = discover_forms(client, world)
    assert len(forms) >= 8, [f.action for f in forms]
    before = bill_snapshot()
    problems: list[str] = []
    for form in forms:
        names = [n for n in form.fields if n != "csrfmiddlewaretoken"]
        # A what-if grid has ~70 inputs that each run the engine: there every
        # field gets every third value, rotating, so each value still meets
        # every kind of input on that form.
        stride = 3 if len(names) > LARGE_FORM else 1
        for j, name in enumerate(names):
            for value in VALUES[j % stride :: stride]:
                data: dict[str, object] = {**form.fields, name: value}
                response = submit(client, form, data)
                status = response.status_code  # type: ignore[attr-defined]
                where = f"{form.method.upper()} {form.action} {name}={value[:30]!r}"
                if status >= 500:
                    problems.append(f"{where}: {status}")
                    continue
                if status != 200:
                    continue
                body = response.content.decode()  # type: ignore[attr-defined]
                problems.extend(f"{where}: {e}" for e in unnamed_errors(body))
                if names_field(body, name) and value and shown(value) not in body:
                    problems.append(f"{where}: refused without naming the value")
                strict = form.types.get(name) in STRICT_TYPES
                if strict and value in NOT_A_NUMBER and not refused(body):
                    problems.append(f"{where}: accepted silently")
        for name in form.files:
            for label, content in FILES.items():
                upload = SimpleUploadedFile(f"fuzz-{label}.csv", content)
                response = submit(client, form, {**form.fields, name: upload})
                status = response.status_code  # type: ignore[attr-defined]
                if status >= 500:
                    problems.append(f"{form.action} file {label}: {status}")
    assert not problems, "\n".join(problems[:60])
    assert not IngestRun.objects.filter(status=IngestRun.RUNNING).exists()
    assert bill_snapshot() == before


def test_query_parameters_of_every_page_refuse_absurd_values(
    world: dict[str, str],
) -> None:
    # A server error is a finding to list, not an exception to stop at.
    client = Client(raise_request_exception=False)
    client.force_login(user_in("fuzzer", "admin"))
    params = ["start", "end", "basis", "days", "layouts", "page", "sort", "grain"]
    problems = []
    for name, route in url_patterns():
        if name.startswith("admin:"):
            continue
        path = concrete(route, world)
        if path.startswith(SKIP_PREFIXES):
            continue
        for param in params:
            for value in VALUES:
                response = client.get(path, {param: value})
                if response.status_code >= 500:
                    problems.append(f"GET {path}?{param}={value[:30]!r}: 500")
    assert not problems, "\n".join(problems[:60])
    assert not IngestRun.objects.filter(status=IngestRun.RUNNING).exists()


def test_the_fuzz_values_include_every_case_the_security_review_found() -> None:
    # Guard against someone trimming the table: these broke pages once.
    for value in ("1e309", "NaN", "-1", "0001-01-01", "9999-12-31", "2026-13-45"):
        assert value in VALUES
    assert date(1, 1, 1).isoformat() in VALUES
