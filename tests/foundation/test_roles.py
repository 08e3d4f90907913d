"""The role model on an empty database, written out by hand (never read from
costapp/roles.py, so a change there that was not meant fails here)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client

from costapp.models import AuditEntry

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

FINANCE = {
    "costapp.view_overview",
    "costapp.view_bills",
    "costapp.export_bills",
    "costapp.view_costline",
    "costapp.view_ratecard",
    "costapp.view_billingperiodsource",
    "costapp.view_unitcostfigure",
    "costapp.view_budget",
    "costapp.add_budget",
    "costapp.change_budget",
    "costapp.view_savedview",
    "costapp.add_savedview",
    "costapp.change_savedview",
    "costapp.delete_savedview",
}
TECH_LEAD = FINANCE | {
    "costapp.view_fleet",
    "costapp.run_whatif",
    "costapp.view_deployment",
    "costapp.change_deployment",
    "costapp.view_pool",
    "costapp.view_deploymenthour",
    "costapp.view_devicehour",
    "costapp.view_histogramhour",
    "costapp.view_enginediscovery",
    "costapp.view_ingestrun",
    "costapp.view_scenario",
    "costapp.add_scenario",
    "costapp.view_calibration",
    "costapp.add_calibration",
    "costapp.view_alertrule",
    "costapp.add_alertrule",
    "costapp.change_alertrule",
    "costapp.delete_alertrule",
    "costapp.view_silence",
    "costapp.add_silence",
    "costapp.change_silence",
    "costapp.view_channel",
    "costapp.manage_channels",
    "costapp.add_channel",
    "costapp.change_channel",
    "costapp.view_delivery",
}
ADMIN = TECH_LEAD | {
    "costapp.run_backfill",
    "costapp.import_focus",
    "costapp.manage_sources",
    "costapp.delete_channel",
    "costapp.rotate_channel_secrets",
    "costapp.delete_silence",
    "costapp.manage_users",
    "costapp.view_auditentry",
    "costapp.add_deployment",
    "costapp.delete_deployment",
    "costapp.add_pool",
    "costapp.change_pool",
    "costapp.delete_pool",
    "costapp.add_ratecard",
    "costapp.change_ratecard",
    "costapp.delete_ratecard",
    "costapp.change_scenario",
    "costapp.delete_scenario",
    "costapp.change_calibration",
    "costapp.delete_calibration",
    "costapp.delete_budget",
    "costapp.change_ingestrun",
    "costapp.delete_billingperiodsource",
    "auth.view_user",
    "auth.add_user",
    "auth.change_user",
    "auth.view_group",
}


def group_permissions(name: str) -> set[str]:
    return {
        f"{p.content_type.app_label}.{p.codename}"
        for p in Group.objects.get(name=name).permissions.select_related("content_type")
    }


def member(name: str, *groups: str) -> User:
    user = User.objects.create_user(name, password="a-long-test-password-1")
    for group in groups:
        user.groups.add(Group.objects.get(name=group))
    return user


def test_each_group_holds_exactly_its_roles_permissions_after_migrate() -> None:
    assert group_permissions("finance") == FINANCE
    assert group_permissions("tech lead") == TECH_LEAD
    assert group_permissions("admin") == ADMIN


def test_roles_sync_restores_a_group_someone_edited_by_hand_and_is_idempotent() -> None:
    finance = Group.objects.get(name="finance")
    finance.permissions.clear()
    Group.objects.get(name="tech lead").delete()
    call_command("roles_sync", verbosity=0)
    call_command("roles_sync", verbosity=0)
    assert group_permissions("finance") == FINANCE
    assert group_permissions("tech lead") == TECH_LEAD


def test_a_users_rights_are_the_union_of_their_groups() -> None:
    user = member("both", "finance", "tech lead")
    assert user.has_perm("costapp.export_bills")
    assert user.has_perm("costapp.run_whatif")
    assert not user.has_perm("costapp.run_backfill")


def test_the_admin_group_opens_the_admin_site_without_a_staff_flag() -> None:
    client = Client()
    client.force_login(member("ada", "admin"))
    assert client.get("/admin/").status_code == 200
    assert client.get("/admin/auth/user/").status_code == 200
    lead = Client()
    lead.force_login(member("lee", "tech lead"))
    assert lead.get("/admin/").status_code == 302  # to the admin login


def test_an_admin_group_user_cannot_make_anyone_a_superuser() -> None:
    admin_user = member("ada", "admin")
    target = member("tom", "finance")
    root = User.objects.create_superuser("root", password="a-long-test-password-1")
    client = Client()
    client.force_login(admin_user)

    page = client.get(f"/admin/auth/user/{target.pk}/change/")
    assert b"is_superuser" not in page.content
    assert b"user_permissions" not in page.content
    # A crafted POST with the fields the form does not show.
    client.post(
        f"/admin/auth/user/{target.pk}/change/",
        {
            "username": "tom",
            "is_active": "on",
            "is_superuser": "on",
            "is_staff": "on",
            "groups": [Group.objects.get(name="admin").pk],
            "last_login_0": "",
            "last_login_1": "",
            "date_joined_0": "2026-01-01",
            "date_joined_1": "00:00:00",
        },
    )
    client.post(
        f"/admin/auth/user/{admin_user.pk}/change/",
        {"username": "ada", "is_active": "on", "is_superuser": "on"},
    )
    client.post(
        "/admin/auth/user/add/",
        {
            "username": "eve",
            "password1": "a-long-test-password-2",
            "password2": "a-long-test-password-2",
            "usable_password": "true",
            "is_superuser": "on",
        },
    )
    assert set(User.objects.filter(is_superuser=True)) == {root}
    # Nor take over a superuser by changing its password or groups.
    assert client.get(f"/admin/auth/user/{root.pk}/change/").status_code in {302, 403}
    assert client.get(f"/admin/auth/user/{root.pk}/password/").status_code in {
        302,
        403,
        404,
    }


def test_the_admin_user_form_offers_only_the_three_product_groups() -> None:
    Group.objects.create(name="django-superpowers")
    client = Client()
    client.force_login(member("ada", "admin"))
    page = client.get(f"/admin/auth/user/{member('tom').pk}/change/").content.decode()
    assert "django-superpowers" not in page
    for name in ("finance", "tech lead", "admin"):
        assert name in page


def test_a_changed_group_ends_the_users_sessions() -> None:
    user = member("fin", "finance")
    client = Client()
    client.force_login(user)
    assert client.get("/").status_code == 200
    user.groups.add(Group.objects.get(name="tech lead"))
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_a_user_in_no_group_lands_on_a_page_saying_whom_to_ask() -> None:
    member("ada", "admin").__class__.objects.filter(username="ada").update(
        email="ada@example.com"
    )
    client = Client()
    client.force_login(member("nobody"))
    page = client.get("/home/")
    assert page.status_code == 200
    assert b"no role yet" in page.content
    assert b"ada@example.com" in page.content


@pytest.mark.parametrize(
    ("groups", "landing"),
    [
        (("finance",), "/"),
        (("tech lead",), "/"),
        (("admin",), "/"),
    ],
)
def test_after_login_each_role_lands_on_a_page_it_can_read(
    groups: tuple[str, ...], landing: str
) -> None:
    client = Client()
    client.force_login(member("u", *groups))
    response = client.get("/home/")
    assert response.status_code == 302
    assert response["Location"] == landing
    assert client.get(landing).status_code == 200


def test_every_post_is_written_to_the_audit_log_with_user_and_address() -> None:
    client = Client(REMOTE_ADDR="203.0.113.7")
    client.force_login(member("fin", "finance"))
    client.post("/costs/backfill/", {"start": "2026-01-01"})
    entry = AuditEntry.objects.get()
    assert (entry.username, entry.action, entry.status_code, entry.client_ip) == (
        "fin",
        "costs:backfill",
        403,
        "203.0.113.7",
    )
    assert entry.params == {"start": "2026-01-01"}
    with pytest.raises(ValueError, match="append-only"):
        entry.save()
    with pytest.raises(ValueError, match="append-only"):
        entry.delete()


def test_the_audit_log_never_keeps_a_password() -> None:
    admin_user = member("ada", "admin")
    client = Client()
    client.force_login(admin_user)
    client.post(
        "/admin/auth/user/add/",
        {
            "username": "newbie",
            "password1": "s3cret-long-password-9",
            "password2": "s3cret-long-password-9",
            "usable_password": "true",
        },
    )
    entry = AuditEntry.objects.get(action="admin:auth_user_add")
    assert entry.params["password1"] == "***"
    assert "s3cret" not in str(entry.params)


def test_data_pages_and_exports_are_never_cached_and_health_is_public() -> None:
    client = Client()
    client.force_login(member("fin", "finance"))
    for path in ("/", "/costs/", "/costs/export.csv?start=2026-11-01&end=2026-11-02"):
        assert client.get(path)["Cache-Control"] == "private, no-store", path


def test_readyz_tells_anonymous_probes_nothing_about_the_broker(settings) -> None:  # type: ignore[no-untyped-def]
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["problems"] == ["broker unreachable"]
    assert "127.0.0.1" not in response.content.decode()
