"""The admin site's own login page admits whom the admin site admits: an
active member of the admin group (or a superuser). Django's login form asks
for the staff flag, which the admin group does not set, and refused every
admin with "a staff account"; the staff flag alone opens nothing."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

PASSWORD = "a-long-test-password-7"


def sign_in(username: str) -> tuple[Client, int, str]:
    """The admin login page and its form, CSRF checks on: the client, the
    POST's status and where it sends the browser (or the page's text)."""
    client = Client(enforce_csrf_checks=True)
    page = client.get("/admin/login/", {"next": "/admin/"})
    assert page.status_code == 200
    token = re.search(
        r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()
    )
    assert token
    response = client.post(
        "/admin/login/?next=/admin/",
        {
            "username": username,
            "password": PASSWORD,
            "csrfmiddlewaretoken": token.group(1),
            "next": "/admin/",
        },
    )
    where = response.get("Location", "") or response.content.decode()
    return client, response.status_code, where


def test_an_admin_group_member_signs_in_to_the_admin_site() -> None:
    user_in("ada", "admin", password=PASSWORD)
    client, status, where = sign_in("ada")
    assert (status, where) == (302, "/admin/")
    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/auth/user/").status_code == 200
    # Signed in, the login page sends her on to the index.
    assert client.get("/admin/login/")["Location"] == "/admin/"


def test_a_superuser_signs_in_to_the_admin_site() -> None:
    User.objects.create_superuser("root", password=PASSWORD)
    client, status, where = sign_in("root")
    assert (status, where) == (302, "/admin/")
    assert client.get("/admin/").status_code == 200


@pytest.mark.parametrize("group", ["tech lead", "finance"])
def test_tech_leads_and_finance_are_refused_with_the_reason(group: str) -> None:
    user_in("lee", group, password=PASSWORD)
    client, status, page = sign_in("lee")
    assert status == 200  # the form again, with its error
    assert "account in the admin group" in page
    assert "_auth_user_id" not in client.session
    assert client.get("/admin/").status_code == 302


def test_the_staff_flag_alone_is_not_enough() -> None:
    staff = user_in("sam", "finance", password=PASSWORD)
    staff.is_staff = True
    staff.save()
    client, status, _ = sign_in("sam")
    assert status == 200
    assert client.get("/admin/").status_code == 302


def test_an_inactive_admin_group_member_is_refused() -> None:
    former = user_in("old", "admin", password=PASSWORD)
    former.is_active = False
    former.save()
    client, status, _ = sign_in("old")
    assert status == 200
    assert client.get("/admin/").status_code == 302
