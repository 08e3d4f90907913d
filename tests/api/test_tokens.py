"""Tokens: created on a page (the secret shown once, only its hash kept),
several per user, listed and revoked there; revoked, expired, wrong-scope and
unknown tokens get 401."""

from __future__ import annotations

import hashlib
import html
import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import Client

from costapp.api.tokens import api_token_create
from costapp.models import ApiToken, AuditEntry
from tests.api.conftest import TokenFor
from tests.api.helpers import api_get
from tests.support.users import user_in

pytestmark = pytest.mark.django_db

SECRET = re.compile(r'<code id="token-secret">(cst_[A-Za-z0-9_-]+)</code>')


def logged_in(*groups: str, name: str = "finance-user") -> tuple[Client, object]:
    user = user_in(name, *groups)
    client = Client()
    client.force_login(user)
    return client, user


def test_a_user_creates_several_tokens_and_only_a_hash_is_kept() -> None:
    client, user = logged_in("finance")
    secrets = []
    for name in ("grafana", "notebook"):
        page = client.post(
            "/api/tokens/", {"name": name, "scopes": ["api", "metrics"], "days": "30"}
        )
        assert page.status_code == 200
        found = SECRET.findall(page.content.decode())
        assert len(found) == 1
        secrets.append(found[0])
    tokens = ApiToken.objects.filter(user=user).order_by("pk")
    assert [t.name for t in tokens] == ["grafana", "notebook"]
    for token, secret in zip(tokens, secrets, strict=True):
        assert token.digest == hashlib.sha256(secret.encode()).hexdigest()
        assert token.prefix == secret[:12]
        assert token.scopes == ["api", "metrics"]
        stored = [
            str(v) for v in ApiToken.objects.filter(pk=token.pk).values().get().values()
        ]
        assert not any(secret in v for v in stored)
    listing = client.get("/api/tokens/").content.decode()
    assert not SECRET.search(listing)  # shown once
    assert secrets[0][:12] in listing and secrets[1][:12] in listing
    # The POST was audited, and the audit holds no secret.
    entries = AuditEntry.objects.filter(action="api:tokens")
    assert entries.count() == 2
    assert all(not any(s in str(e.params) for s in secrets) for e in entries)
    # Each works.
    for secret in secrets:
        assert api_get("/api/v1/unit-costs/", secret).status_code == 200


def test_a_revoked_token_gets_401_and_only_its_owner_revokes_it() -> None:
    client, user = logged_in("finance")
    made = api_token_create(user=user, name="t", scopes=["api"],
                            expires_at=datetime.now(UTC) + timedelta(days=1))  # fmt: skip
    assert api_get("/api/v1/unit-costs/", made.secret).status_code == 200
    other, _ = logged_in("finance", name="someone-else")
    refused = other.post("/api/tokens/", {"revoke": str(made.token.pk)})
    assert refused.status_code == 400
    assert "not one of your live tokens" in refused.content.decode()
    assert api_get("/api/v1/unit-costs/", made.secret).status_code == 200
    done = client.post("/api/tokens/", {"revoke": str(made.token.pk)})
    assert done.status_code == 302
    made.token.refresh_from_db()
    assert made.token.revoked_at is not None
    response = api_get("/api/v1/unit-costs/", made.secret)
    assert response.status_code == 401
    assert response.json()["detail"] == "token revoked"
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "revoked" in client.get("/api/tokens/").content.decode()


def test_an_expired_token_gets_401(token_for: TokenFor) -> None:
    secret = token_for("finance", days=2)
    assert api_get("/api/v1/budgets/", secret).status_code == 200
    with time_machine.travel(datetime.now(UTC) + timedelta(days=3)):
        response = api_get("/api/v1/budgets/", secret)
    assert response.status_code == 401
    assert response.json()["detail"] == "token expired"


def test_no_token_a_bad_one_or_the_wrong_scope_get_401(token_for: TokenFor) -> None:
    metrics_only = token_for("finance", scopes=("metrics",))
    for header, detail in (
        (None, "Authentication credentials were not provided."),
        ("Bearer cst_not-a-token", "unknown token"),
        ("Bearer something-else", "not a costapp token"),
        ("Basic dXNlcjpwYXNz", "expected Authorization: Bearer <token>"),
        (f"Bearer {metrics_only}", "token lacks the 'api' scope"),
    ):
        extra = {"HTTP_AUTHORIZATION": header} if header else {}
        response = Client().get("/api/v1/unit-costs/", **extra)
        assert response.status_code == 401, header
        assert response.json()["detail"] == detail
        assert response["WWW-Authenticate"] == 'Bearer realm="costapp api"'


def test_a_session_is_not_a_token() -> None:
    client, _ = logged_in("admin")
    assert client.get("/api/v1/unit-costs/").status_code == 401


def test_an_inactive_users_token_gets_401(token_for: TokenFor) -> None:
    secret = token_for("finance")
    token = ApiToken.objects.get(prefix=secret[:12])
    token.user.is_active = False
    token.user.save()
    assert api_get("/api/v1/unit-costs/", secret).status_code == 401


def test_last_use_is_recorded_at_most_once_a_minute(token_for: TokenFor) -> None:
    secret = token_for("finance")
    token = ApiToken.objects.get(prefix=secret[:12])
    assert token.last_used_at is None
    at = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
    with time_machine.travel(at, tick=False):
        token.expires_at = at + timedelta(days=1)
        token.save()
        api_get("/api/v1/budgets/", secret)
    token.refresh_from_db()
    assert token.last_used_at == at
    with time_machine.travel(at + timedelta(seconds=30), tick=False):
        api_get("/api/v1/budgets/", secret)
    token.refresh_from_db()
    assert token.last_used_at == at
    with time_machine.travel(at + timedelta(seconds=90), tick=False):
        api_get("/api/v1/budgets/", secret)
    token.refresh_from_db()
    assert token.last_used_at == at + timedelta(seconds=90)


@pytest.mark.parametrize(
    ("data", "field", "quoted"),
    [
        ({"name": "x", "scopes": ["root"], "days": "30"}, "scopes", "root"),
        ({"name": "x", "scopes": ["api"], "days": "400"}, "days", "days='400'"),
        ({"name": "", "scopes": ["api"], "days": "30"}, "name", "name=''"),
        # int() reads these as 30; nobody types them meaning 30.
        ({"name": "x", "scopes": ["api"], "days": "3_0"}, "days", "days='3_0'"),
        ({"name": "x", "scopes": ["api"], "days": "\uff13\uff10"}, "days", "days="),
        ({"name": "x" * 10_000, "scopes": ["api"], "days": "30"}, "name", "name='xxx"),
    ],
)
def test_the_token_form_refuses_by_name(
    data: dict[str, object], field: str, quoted: str
) -> None:
    client, user = logged_in("finance")
    page = client.post("/api/tokens/", data)
    assert page.status_code == 400
    assert quoted in html.unescape(page.content.decode())
    assert not ApiToken.objects.filter(user=user).exists()


def test_a_user_without_a_role_cannot_open_the_token_page() -> None:
    client, _ = logged_in(name="nobody")
    assert client.get("/api/tokens/").status_code == 403
