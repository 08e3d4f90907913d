"""A 403 is logged as one line that names who, what and the missing right."""

from __future__ import annotations

import logging

import pytest
from django.test import Client

from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_a_denial_is_one_line_without_a_traceback(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    client.force_login(user_in("fin", "finance"))
    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert client.get("/alerts/").status_code == 403
    (record,) = [r for r in caplog.records if r.name == "django.request"]
    text = record.getMessage()
    assert text.startswith("Forbidden: GET /alerts/ by 'fin' (missing costapp.")
    assert record.exc_info is None and "\n" not in text


def test_other_request_errors_keep_their_traceback(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="django.request"):
        logging.getLogger("django.request").error("boom", exc_info=ValueError("x"))
    (record,) = [r for r in caplog.records if r.name == "django.request"]
    assert record.exc_info is not None
