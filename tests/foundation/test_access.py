from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_healthz_and_readyz_answer_without_login(client: Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.content
    assert ready.json()["status"] == "ok"


def test_every_page_but_login_requires_a_login(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert client.get("/login/").status_code == 200


def test_migrate_creates_the_three_groups_of_users() -> None:
    assert set(Group.objects.values_list("name", flat=True)) >= {
        "finance",
        "tech lead",
        "admin",
    }
    finance = Group.objects.get(name="finance")
    assert finance.permissions.filter(codename="view_costline").exists()
    assert not finance.permissions.filter(codename="change_deployment").exists()


def test_a_logged_in_user_sees_the_overview(client: Client) -> None:
    user = user_in("lead", "tech lead", password="pw")
    client.force_login(user)
    assert client.get("/").status_code == 200


def test_the_login_form_names_the_field_and_never_shows_the_password(
    client: Client,
) -> None:
    user_in("lead", "tech lead", password="the-right-one")
    page = client.post(
        "/login/", {"username": "le\x00ad", "password": "sec\x00ret-typed"}
    ).content.decode()
    # The product's one NUL rule (costapp/forms.py), in its own words.
    assert "username=&#x27;le\\x00ad&#x27;: contains a NUL byte" in page
    assert "password: contains a NUL byte" in page
    assert "ret-typed" not in page
    empty = client.post("/login/", {"username": "lead", "password": ""})
    assert "password: This field is required." in empty.content.decode()
    wrong = client.post("/login/", {"username": "lead", "password": "not-it"})
    assert "not-it" not in wrong.content.decode()
    assert "Please enter a correct username and password" in wrong.content.decode()
    right = client.post("/login/", {"username": "lead", "password": "the-right-one"})
    assert right.status_code == 302
