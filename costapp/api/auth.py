"""``Authorization: Bearer <token>`` for DRF, and the permission classes that
map each endpoint onto the role matrix (costapp/roles.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from costapp.api.tokens import api_token_authenticate
from costapp.models import ApiToken
from costapp.models.api import SCOPE_API

if TYPE_CHECKING:
    from rest_framework.views import APIView


def bearer_secret(header: str) -> str | None:
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return None
    return given.strip()


class BearerTokenAuthentication(BaseAuthentication):
    scope = SCOPE_API

    def authenticate(
        self, request: Request
    ) -> tuple[AbstractBaseUser, ApiToken] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None  # not authenticated: NotAuthenticated -> 401
        secret = bearer_secret(header)
        if secret is None:
            raise exceptions.AuthenticationFailed(
                "expected Authorization: Bearer <token>"
            )
        verdict = api_token_authenticate(
            secret=secret, scope=self.scope, now=timezone.now()
        )
        if verdict.token is None:
            raise exceptions.AuthenticationFailed(verdict.refusal)
        return verdict.token.user, verdict.token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="costapp api"'


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "costapp.api.auth.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token with the `api` scope (page /api/tokens/).",
        }


class HasPermission(BasePermission):
    """The token's user holds ``required_permission`` of the view (the same
    right the matching page's ``requires`` checks)."""

    message = "your role may not read this"

    def has_permission(self, request: Request, view: APIView) -> bool:
        needed: str = view.required_permission  # type: ignore[attr-defined]
        user = request.user
        if not user or not user.is_authenticated:
            return False
        return bool(user.has_perm(needed))
