"""API tokens: a user's bearer credentials for /api/v1/ and /metrics.

Only a SHA-256 of the secret is stored (the secret is 256 bits from
``secrets``, so a fast hash is enough: there is nothing to brute-force); the
first characters (``prefix``) are kept in clear so a user can tell tokens
apart. A token acts as its user: it never grants more than the user's groups,
and the scopes narrow it further (``api`` reads /api/v1/, ``metrics`` is what
Prometheus sends to /metrics).
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.db import models

SCOPE_API = "api"
SCOPE_METRICS = "metrics"
TOKEN_SCOPES = [
    (SCOPE_API, "api: read /api/v1/"),
    (SCOPE_METRICS, "metrics: scrape /metrics"),
]
# What every secret starts with: a scanner (or a person) can recognise one.
SECRET_MARKER = "cst_"  # noqa: S105 (a prefix, not a secret)
PREFIX_LENGTH = 12  # "cst_" + 8 characters of the secret


def token_digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiToken(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=PREFIX_LENGTH)
    digest = models.CharField(max_length=64, unique=True)  # sha256 hex
    scopes = models.JSONField(default=list)  # a subset of TOKEN_SCOPES' keys
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["user", "revoked_at"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"
