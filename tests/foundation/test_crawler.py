"""Every URL pattern, as every kind of user, GET and POST.

The URL patterns come from the URLconf, so a new page is walked without
editing this file; what each role may do is written here by hand (and in
docs/security.md) from the roles in PRODUCT.md, never read from the views. A
pattern missing from ``EXPECTED`` fails.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from django.test import Client

from tests.support.crawl import concrete, seed_url_objects, url_patterns
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

ANON, NONE, FIN, LEAD, ADMIN = "anonymous", "no group", "finance", "tech lead", "admin"
ROLES = (ANON, NONE, FIN, LEAD, ADMIN)
PUBLIC = frozenset(ROLES)
LOGGED_IN = frozenset({NONE, FIN, LEAD, ADMIN})
READERS = frozenset({FIN, LEAD, ADMIN})  # finance, tech leads, admins
LEADS = frozenset({LEAD, ADMIN})
ADMINS = frozenset({ADMIN})


@dataclass(frozen=True)
class Rule:
    get: frozenset[str]
    post: frozenset[str] | None  # None: the page takes no POST (405 for readers)


# URL name -> who may GET it and who may POST to it.
EXPECTED: dict[str, Rule] = {
    "healthz": Rule(PUBLIC, None),
    "readyz": Rule(PUBLIC, None),
    "login": Rule(PUBLIC, PUBLIC),
    "logout": Rule(frozenset(), LOGGED_IN),
    "landing": Rule(LOGGED_IN, None),
    "overview": Rule(READERS, None),
    "economics:explanation": Rule(READERS, None),
    "economics:budgets": Rule(READERS, READERS),
    "economics:idle": Rule(READERS, None),
    "economics:rightsizing": Rule(READERS, None),
    "economics:moved": Rule(READERS, None),
    "economics:moved_explanation": Rule(READERS, None),
    # Token-authenticated for Prometheus: no session opens it (TOKEN_AUTH).
    "metrics": Rule(frozenset(), None),
    "fleet:deployments": Rule(LEADS, None),
    "fleet:deployment": Rule(LEADS, None),
    "costs:bills": Rule(READERS, None),
    "costs:reconciliation": Rule(READERS, None),
    "costs:breakdown": Rule(READERS, None),
    "costs:bill_lines": Rule(READERS, None),
    "costs:bill_lines_csv": Rule(READERS, None),
    "costs:export": Rule(READERS, None),
    "costs:export_zip": Rule(READERS, None),
    "costs:export_summary": Rule(READERS, None),
    "costs:reconciliation_export": Rule(READERS, None),
    "costs:backfill": Rule(ADMINS, ADMINS),
    "costs:run": Rule(LEADS, None),
    "costs:focus_import": Rule(ADMINS, ADMINS),
    "telemetry:index": Rule(LEADS, ADMINS),
    "telemetry:deployment": Rule(LEADS, None),
    "capacity:index": Rule(LEADS, None),
    "capacity:mig": Rule(LEADS, None),
    "capacity:search": Rule(LEADS, None),
    "capacity:calibrations": Rule(LEADS, LEADS),
    "capacity:scenarios": Rule(LEADS, None),
    "capacity:scenario_share": Rule(LEADS, None),
    "capacity:scenario_csv": Rule(LEADS, None),
    "capacity:whatif": Rule(LEADS, None),
    "capacity:save": Rule(LEADS, LEADS),
    "capacity:fit": Rule(LEADS, LEADS),
    "alerts:rules": Rule(LEADS, LEADS),
    "alerts:rule": Rule(LEADS, LEADS),
    "alerts:silences": Rule(LEADS, LEADS),
    "alerts:channels": Rule(LEADS, LEADS),
    "alerts:channel": Rule(LEADS, LEADS),
    "alerts:log": Rule(LEADS, None),
    # What follows new data, step by step; POST evaluates every rule now.
    "pipeline:status": Rule(LEADS, LEADS),
    # The JSON API: bearer tokens only (TOKEN_AUTH); its pages are a session's.
    "api:unit_costs": Rule(frozenset(), None),
    "api:baselines": Rule(frozenset(), None),
    "api:spend": Rule(frozenset(), None),
    "api:idle": Rule(frozenset(), None),
    "api:moved": Rule(frozenset(), None),
    "api:overview": Rule(frozenset(), None),
    "api:budgets": Rule(frozenset(), None),
    "api:rightsizing": Rule(frozenset(), None),
    "api:alert_events": Rule(frozenset(), None),
    "api:alerts_active": Rule(frozenset(), None),
    "api:v1_schema": Rule(frozenset(), None),
    "api:tokens": Rule(READERS, READERS),
    "api:schema": Rule(READERS, None),
    "api:docs": Rule(READERS, None),
    "help_index": Rule(READERS, None),
    "help": Rule(READERS, None),
    "help_screenshot": Rule(READERS, None),
    # One's own saved views: list (POST renames or deletes), and the save form.
    "saved_views:list": Rule(READERS, READERS),
    "saved_views:new": Rule(READERS, READERS),
    # The admin site: its own login page for everyone outside the admin group.
    "admin:index": Rule(ADMINS, ADMINS),
}
# The admin site's generated pages check model permissions themselves
# (tests/foundation/test_roles.py covers users); the crawler walks its index.
SKIPPED_NAMESPACES = ("admin:",)
# Answer 401 without the bearer token, whoever is logged in; tested with the
# token in tests/economics/test_metrics.py and tests/api/.
TOKEN_AUTH = frozenset(
    {
        "metrics",
        "api:unit_costs",
        "api:baselines",
        "api:spend",
        "api:idle",
        "api:moved",
        "api:overview",
        "api:budgets",
        "api:rightsizing",
        "api:alert_events",
        "api:alerts_active",
        "api:v1_schema",
    }
)


@pytest.fixture(autouse=True)
def metrics_token(settings: object) -> None:
    settings.COSTAPP_METRICS_TOKEN = "crawler-token-not-sent"  # type: ignore[attr-defined]


@pytest.fixture
def seeded() -> dict[str, str]:
    return seed_url_objects()


_users = itertools.count()


def client_for(role: str) -> Client:
    client = Client(enforce_csrf_checks=True)
    if role != ANON:
        groups = {NONE: (), FIN: ("finance",), LEAD: ("tech lead",), ADMIN: ("admin",)}
        username = f"{role.replace(' ', '-')}-{next(_users)}"
        client.force_login(user_in(username, *groups[role]))
    return client


def csrf_token(client: Client) -> str:
    client.get("/login/")
    return client.cookies["csrftoken"].value


def walk() -> list[tuple[str, str]]:
    return [
        (name, route)
        for name, route in url_patterns()
        if name in EXPECTED or not name.startswith(SKIPPED_NAMESPACES)
    ]


def test_every_url_pattern_has_a_row_in_the_expected_matrix() -> None:
    unlisted = sorted(name for name, _ in walk() if name not in EXPECTED)
    assert not unlisted, f"add these URL names to EXPECTED: {unlisted}"


def assert_refused(role: str, name: str, method: str, response: object) -> None:
    status = response.status_code  # type: ignore[attr-defined]
    where = f"{method} {name} as {role}"
    if name in TOKEN_AUTH:
        assert status == 401, f"{where}: {status}"
    elif role == ANON:
        assert status == 302, where
        assert "/login/" in response["Location"], where  # type: ignore[index]
    elif name.startswith("admin:"):
        assert status == 302 and "/admin/login/" in response["Location"], where  # type: ignore[index]
    else:
        assert status == 403, f"{where}: {status}"
        body = response.content.decode()  # type: ignore[attr-defined]
        assert "You do not have access to this page" in body, where
        assert "administrator" in body, where


def test_each_role_gets_exactly_its_pages(seeded: dict[str, str]) -> None:
    clients = {role: client_for(role) for role in ROLES}
    for name, route in walk():
        rule = EXPECTED[name]
        path = concrete(route, seeded)
        for role, client in clients.items():
            if name == "logout":
                continue  # walked in its own test: it ends the session
            response = client.get(path)
            where = f"GET {path} ({name}) as {role}"
            assert response.status_code != 500, where
            assert response.status_code != 404, where
            if role in rule.get:
                assert response.status_code in {200, 302}, (
                    f"{where}: {response.status_code}"
                )
                if role != ANON and response.status_code == 302:
                    assert "/login/" not in response["Location"], where
            else:
                assert_refused(role, name, "GET", response)


def test_posts_need_the_right_and_a_csrf_token(seeded: dict[str, str]) -> None:
    for name, route in walk():
        rule = EXPECTED[name]
        path = concrete(route, seeded)
        for role in ROLES:
            client = client_for(role)
            where = f"POST {path} ({name}) as {role}"
            # Without a token: refused before anything else happens.
            no_token = client.post(path, {})
            assert no_token.status_code == 403, f"{where} without a CSRF token"
            response = client.post(path, {"csrfmiddlewaretoken": csrf_token(client)})
            assert response.status_code != 500, where
            if rule.post is not None and role in rule.post:
                assert response.status_code in {200, 302, 400}, (
                    f"{where}: {response.status_code}"
                )
            elif rule.post is None and role in rule.get and role != ANON:
                assert response.status_code == 405, f"{where}: {response.status_code}"
            elif role == ANON and name in {"healthz", "readyz"}:
                assert response.status_code == 405, where
            else:
                assert_refused(role, name, "POST", response)


def test_logout_takes_a_post_and_ends_the_session() -> None:
    client = client_for(FIN)
    assert client.get("/logout/").status_code == 405
    response = client.post("/logout/", {"csrfmiddlewaretoken": csrf_token(client)})
    assert response.status_code == 302
    assert client.get("/").status_code == 302  # to login again
