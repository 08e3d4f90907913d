"""Absurd input into every form and file field.

Forms are discovered by crawling: every ``<form>`` on every page an admin can
open (admins see every form), so a new form is fuzzed without editing this
file. Each answer is a 4xx, a redirect, or a 200 that either accepted the value
or names the field and the value it refused; never a 500. Afterwards no run is
left "running" and the bill stored before is unchanged.
"""

from __future__ import annotations

from datetime import date

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from costapp.models import IngestRun
from tests.support.fuzz import (
    FILES,
    LARGE_FORM,
    NOT_A_NUMBER,
    STRICT_TYPES,
    VALUES,
    bill_snapshot,
    discover_forms,
    fuzz_world,
    names_field,
    refused,
    shown,
    submit,
    unnamed_errors,
)
from tests.support.users import user_in

# Not in the SQLite smoke subset: minutes, and the forms are the same.
LARGE_STRIDE = 5
pytestmark = [pytest.mark.django_db, pytest.mark.long]


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    return fuzz_world(monkeypatch)


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
        # field gets every fifth value, rotating, and each value still meets
        # every kind of input the form has five of (checked below).
        stride = LARGE_STRIDE if len(names) > LARGE_FORM else 1
        met: dict[str, set[str]] = {}
        for j, name in enumerate(names):
            met.setdefault(form.types.get(name, "text"), set()).update(
                VALUES[j % stride :: stride]
            )
        for kind, values in met.items():
            many = sum(form.types.get(n, "text") == kind for n in names) >= stride
            assert not many or values == set(VALUES), (form.action, kind)
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


def test_the_fuzz_values_include_every_case_the_security_review_found() -> None:
    # Guard against someone trimming the table: these broke pages once.
    for value in ("1e309", "NaN", "-1", "0001-01-01", "9999-12-31", "2026-13-45"):
        assert value in VALUES
    assert date(1, 1, 1).isoformat() in VALUES
