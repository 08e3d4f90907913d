"""Pages go out gzipped to clients that ask, and unchanged to those that do not."""

from __future__ import annotations

import gzip

import pytest
from django.test import Client

from costapp.fleet.demo_setup import demo_fleet_load
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_a_page_is_gzipped_when_asked_and_plain_otherwise(client: Client) -> None:
    demo_fleet_load()
    client.force_login(user_in("lead", "tech lead"))
    plain = client.get("/fleet/")
    zipped = client.get("/fleet/", HTTP_ACCEPT_ENCODING="gzip, deflate, br")
    assert plain.status_code == zipped.status_code == 200
    assert "Content-Encoding" not in plain
    assert zipped["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in zipped["Vary"]
    body = gzip.decompress(zipped.content)
    assert body.startswith(b"<!DOCTYPE html>") or body.lstrip().startswith(b"<")
    assert b"chat" in body and len(zipped.content) < len(body) / 2
