"""The API's pages for a logged-in user: their tokens (create, list, revoke),
the OpenAPI schema and a docs page built from it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator

from costapp.access import requires
from costapp.api.docs import operations
from costapp.api.forms import TokenCreateForm, TokenRevokeForm
from costapp.api.tokens import (
    MAX_TOKENS_PER_USER,
    api_token_create,
    api_token_revoke,
    api_tokens_live_count,
    api_tokens_of,
)

# Every reader may hold tokens: a token reads only what its user's role can.
TOKEN_RIGHT = "costapp.view_overview"  # noqa: S105 (a permission name)


def openapi_schema() -> dict[str, Any]:
    return dict(SchemaGenerator().get_schema(request=None, public=True))


@requires(TOKEN_RIGHT, write=TOKEN_RIGHT)
def tokens(request: HttpRequest) -> HttpResponse:
    user = request.user
    assert isinstance(user, User)  # requires() let only a reader in
    now = timezone.now()
    create = TokenCreateForm(request.POST if "name" in request.POST else None)
    revoke = TokenRevokeForm(request.POST if "revoke" in request.POST else None)
    secret = None
    status = 200
    if request.method == "POST":
        if revoke.is_bound:
            if revoke.is_valid():
                done = api_token_revoke(
                    user=user, token_id=revoke.cleaned_data["revoke"], now=now
                )
                if done:
                    messages.success(request, "token revoked")
                    return redirect("api:tokens")
                revoke.add_error("revoke", "not one of your live tokens")
            status = 400
        elif create.is_valid():
            if api_tokens_live_count(user=user, now=now) >= MAX_TOKENS_PER_USER:
                create.add_error(
                    None,
                    f"you hold {MAX_TOKENS_PER_USER} live tokens; revoke one first",
                )
                status = 400
            else:
                data = create.cleaned_data
                made = api_token_create(
                    user=user,
                    name=data["name"],
                    scopes=data["scopes"],
                    expires_at=now + timedelta(days=data["days"]),
                )
                secret = made.secret  # shown on this response only
                create = TokenCreateForm()
        else:
            status = 400
    return render(
        request,
        "api/tokens.html",
        {
            "form": create,
            "revoke_form": revoke,
            "secret": secret,
            "tokens": api_tokens_of(user=user),
            "now": now,
        },
        status=status,
    )


@requires("costapp.view_overview")
def schema(request: HttpRequest) -> HttpResponse:
    return JsonResponse(openapi_schema(), json_dumps_params={"indent": 1})


@requires("costapp.view_overview")
def docs(request: HttpRequest) -> HttpResponse:
    return render(
        request, "api/docs.html", {"operations": operations(openapi_schema())}
    )
