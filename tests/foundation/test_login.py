"""Login throttling: by username and address together (django-axes)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

PASSWORD = "a-long-test-password-1"


def attempt(address: str, username: str, password: str) -> int:
    client = Client(REMOTE_ADDR=address)
    response = client.post("/login/", {"username": username, "password": password})
    return response.status_code


def test_a_lockout_of_one_username_from_one_address_does_not_lock_out_another_address() -> (
    None
):
    user_in("fin", "finance", password=PASSWORD)
    for _ in range(4):
        assert attempt("198.51.100.1", "fin", "wrong") == 200  # the form again
    assert attempt("198.51.100.1", "fin", "wrong") == 429  # the fifth locks
    # Locked for this user from this address, even with the right password...
    assert attempt("198.51.100.1", "fin", PASSWORD) == 429
    # ...but the same user from elsewhere, and another user from here, log in.
    assert attempt("198.51.100.2", "fin", PASSWORD) == 302
    user_in("lee", "tech lead", password=PASSWORD)
    assert attempt("198.51.100.1", "lee", PASSWORD) == 302


def test_a_forwarded_for_header_is_not_believed_without_a_trusted_proxy(
    settings: object,
) -> None:
    user_in("fin", "finance", password=PASSWORD)
    for n in range(5):
        client = Client(REMOTE_ADDR="198.51.100.1", HTTP_X_FORWARDED_FOR=f"10.0.0.{n}")
        client.post("/login/", {"username": "fin", "password": "wrong"})
    # Rotating a header the client writes itself does not reset the count.
    assert attempt("198.51.100.1", "fin", PASSWORD) == 429


def test_behind_a_trusted_proxy_the_address_it_saw_is_the_client(settings) -> None:  # type: ignore[no-untyped-def]
    settings.COSTAPP_TRUSTED_PROXIES = 1
    user_in("fin", "finance", password=PASSWORD)
    for _ in range(5):
        client = Client(REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR="198.51.100.1")
        client.post("/login/", {"username": "fin", "password": "wrong"})
    other = Client(REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR="198.51.100.2")
    response = other.post("/login/", {"username": "fin", "password": PASSWORD})
    assert response.status_code == 302  # same proxy, another client
    locked = Client(REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR="198.51.100.1")
    response = locked.post("/login/", {"username": "fin", "password": PASSWORD})
    assert response.status_code == 429
