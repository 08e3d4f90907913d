"""API token services: create (the secret is returned once), revoke, and
authenticate a presented secret."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db.models import Q, QuerySet

from costapp.models import ApiToken
from costapp.models.api import (
    PREFIX_LENGTH,
    SECRET_MARKER,
    TOKEN_SCOPES,
    token_digest,
)

SCOPE_NAMES = frozenset(key for key, _label in TOKEN_SCOPES)
MAX_LIFETIME_DAYS = 366
MAX_TOKENS_PER_USER = 20
# last_used_at is written at most once a minute per token: a scrape every 15 s
# must not turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class TokenCreated:
    token: ApiToken
    secret: str  # shown to the user once, never stored


def api_token_create(
    *,
    user: User,
    name: str,
    scopes: Iterable[str],
    expires_at: datetime,
) -> TokenCreated:
    wanted = sorted(set(scopes))
    unknown = [s for s in wanted if s not in SCOPE_NAMES]
    if unknown or not wanted:
        raise ValueError(f"scopes={wanted!r}: choose from {sorted(SCOPE_NAMES)}")
    secret = SECRET_MARKER + secrets.token_urlsafe(32)  # 256 bits
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=secret[:PREFIX_LENGTH],
        digest=token_digest(secret),
        scopes=wanted,
        expires_at=expires_at,
    )
    return TokenCreated(token=token, secret=secret)


def api_token_revoke(*, user: User, token_id: int, now: datetime) -> int:
    """Revoke one of the user's own tokens; 0 when it is not theirs or is
    already revoked."""
    return ApiToken.objects.filter(
        pk=token_id, user=user, revoked_at__isnull=True
    ).update(revoked_at=now)


def api_tokens_of(*, user: User) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-pk")


def api_tokens_live_count(*, user: User, now: datetime) -> int:
    return ApiToken.objects.filter(
        user=user, revoked_at__isnull=True, expires_at__gt=now
    ).count()


@dataclass(frozen=True)
class Verdict:
    token: ApiToken | None
    refusal: str  # "" when accepted; else why (said in the 401)


def api_token_authenticate(*, secret: str, scope: str, now: datetime) -> Verdict:
    """The live token for ``secret`` with ``scope``, its user active; records
    the use. The lookup is by digest (an index hit, no timing signal about the
    secret itself)."""
    if not secret.startswith(SECRET_MARKER) or len(secret) > 200:
        return Verdict(None, "not a costapp token")
    token = (
        ApiToken.objects.select_related("user")
        .filter(digest=token_digest(secret))
        .first()
    )
    if token is None:
        return Verdict(None, "unknown token")
    if token.revoked_at is not None:
        return Verdict(None, "token revoked")
    if token.expires_at <= now:
        return Verdict(None, "token expired")
    if not token.user.is_active:
        return Verdict(None, "the token's user is inactive")
    if scope not in token.scopes:
        return Verdict(None, f"token lacks the {scope!r} scope")
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)
    return Verdict(token, "")
