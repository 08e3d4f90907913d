"""The permission layer every page is built on.

- ``requires(read=..., write=...)`` guards a view: GET and HEAD need ``read``,
  POST needs ``write`` (a view without ``write`` answers POST with 405), any
  other method is 405. A logged-in user without the right gets 403 with the
  page saying whom to ask, never a redirect to the login page; anonymous users
  never get this far (``LoginRequiredMiddleware`` is default-deny).
- ``AuditMiddleware`` writes an ``AuditEntry`` for every POST.
- ``PrivateCacheMiddleware`` keeps data pages and exports out of shared caches.
- Sessions end when a user's groups change (Django already ends them when the
  password changes).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.contrib.sessions.models import Session
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db.models.signals import m2m_changed
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    UnreadablePostError,
)
from django.http.multipartparser import MultiPartParserError
from django.http.response import HttpResponseBase
from django.shortcuts import redirect, render
from django.urls import Resolver404, resolve
from django.utils import timezone
from django.views.decorators.http import require_safe

from costapp.models import AuditEntry
from costapp.roles import ADMIN

logger = logging.getLogger(__name__)

View = TypeVar("View", bound=Callable[..., HttpResponseBase])

READ_METHODS = ("GET", "HEAD")


def requires(read: str, write: str | None = None) -> Callable[[View], View]:
    """Guard a view with a permission per kind of request.

    The names are recorded on the view (``required_permissions``), for a
    reader in a shell; what each role may open is written by hand in
    tests/foundation/test_crawler.py and docs/security.md.
    """

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def guarded(
            request: HttpRequest, *args: Any, **kwargs: Any
        ) -> HttpResponseBase:
            # A POST to a page also reads it; every other method needs the
            # read right before it learns it is not allowed.
            needed = [read, write] if request.method == "POST" and write else [read]
            if not request.user.has_perms(needed):
                request.missing_permission = next(  # type: ignore[attr-defined]
                    p for p in needed if not request.user.has_perm(p)
                )
                raise PermissionDenied
            allowed = [*READ_METHODS, *(["POST"] if write else [])]
            if request.method not in allowed:
                return HttpResponseNotAllowed(allowed)
            return view(request, *args, **kwargs)

        guarded.required_permissions = (read, write)  # type: ignore[attr-defined]
        return guarded  # type: ignore[return-value]

    return decorate


def administrators() -> list[User]:
    """Whom to ask for a right: active members of the admin group."""
    return list(
        User.objects.filter(groups__name=ADMIN, is_active=True)
        .order_by("username")
        .distinct()[:10]
    )


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler403: what the user lacks and whom to ask."""
    missing = getattr(request, "missing_permission", None)
    label = None
    if missing:
        app_label, codename = missing.split(".", 1)
        perm = Permission.objects.filter(
            content_type__app_label=app_label, codename=codename
        ).first()
        label = perm.name if perm else missing
    return render(
        request,
        "403.html",
        {
            "missing": label,
            "groups": (
                list(request.user.groups.values_list("name", flat=True))
                if request.user.is_authenticated
                else []
            ),
            "administrators": administrators(),
        },
        status=403,
    )


# The pages a role can land on after login, in order of preference.
LANDING_PAGES = (
    ("costapp.view_overview", "overview"),
    ("costapp.view_fleet", "fleet:deployments"),
    ("costapp.run_whatif", "capacity:index"),
)


@require_safe
def landing(request: HttpRequest) -> HttpResponse:
    """After login: the first page the user's role can read, or a page saying
    whom to ask when the user is in no group."""
    for perm, url_name in LANDING_PAGES:
        if request.user.has_perm(perm):
            return redirect(url_name)
    if request.user.has_perm("costapp.manage_users"):
        return redirect("admin:index")
    return render(
        request, "no_role.html", {"administrators": administrators()}, status=200
    )


# --- client address -------------------------------------------------------------


def client_ip(request: HttpRequest) -> str | None:
    """The client's address, trusting ``X-Forwarded-For`` only as far as
    ``COSTAPP_TRUSTED_PROXIES`` proxies of our own put it there: a header the
    client wrote itself is never believed. Used by the audit log and by
    django-axes (lockout by username and address)."""
    remote = request.META.get("REMOTE_ADDR") or None
    hops = settings.COSTAPP_TRUSTED_PROXIES
    if hops <= 0:
        return remote
    chain = [
        part.strip()
        for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if part.strip()
    ]
    # Each trusted proxy appends the address it saw; the client is the one
    # the outermost trusted proxy saw.
    if len(chain) < hops:
        return remote
    candidate = chain[-hops]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote


# --- audit log --------------------------------------------------------------------

_SECRET_MARKERS = ("password", "secret", "token", "key", "csrfmiddlewaretoken")
_MAX_VALUE = 200


def _scrubbed(request: HttpRequest) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key in list(request.POST.keys())[:100]:
        if any(marker in key.lower() for marker in _SECRET_MARKERS):
            if key != "csrfmiddlewaretoken":
                params[key[:_MAX_VALUE]] = "***"
            continue
        values = [str(v)[:_MAX_VALUE] for v in request.POST.getlist(key)[:20]]
        params[key[:_MAX_VALUE]] = values[0] if len(values) == 1 else values
    for key in list(request.FILES.keys())[:20]:
        for upload in request.FILES.getlist(key)[:5]:
            params[key[:_MAX_VALUE]] = {
                "file": str(upload.name)[:_MAX_VALUE],
                "bytes": upload.size,
            }
    # PostgreSQL's jsonb cannot hold NUL; the audit keeps the rest.
    return {k.replace("\x00", ""): _no_nul(v) for k, v in params.items()}


def _no_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\\0")
    if isinstance(value, list):
        return [_no_nul(v) for v in value]
    if isinstance(value, dict):
        return {k: _no_nul(v) for k, v in value.items()}
    return value


class AuditMiddleware:
    """Append an ``AuditEntry`` for every POST, allowed or refused, after the
    response is known (the status says which). Login attempts are django-axes'
    to record, not ours (they carry passwords)."""

    SKIP = {"login"}

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.method == "POST":
            try:
                self._record(request, response)
            except Exception:  # an audit failure must not hide the response
                logger.exception("audit entry not written for %s", request.path)
        return response

    def _record(self, request: HttpRequest, response: HttpResponse) -> None:
        try:
            match = resolve(request.path_info)
            action, target = (
                match.view_name,
                ", ".join(f"{k}={v}" for k, v in match.kwargs.items()),
            )
        except Resolver404:
            action, target = "unknown", ""
        if action in self.SKIP:
            return
        user = request.user if request.user.is_authenticated else None
        try:
            params = _scrubbed(request)
        except (RequestDataTooBig, MultiPartParserError, UnreadablePostError):
            params = {"unreadable": True}
        AuditEntry.objects.create(
            user=user,
            username=user.get_username() if user else "",
            action=action[:200],
            method="POST",
            path=request.path[:500].replace("\x00", ""),
            target=target[:500].replace("\x00", ""),
            params=params,
            status_code=response.status_code,
            client_ip=client_ip(request),
        )


class PrivateCacheMiddleware:
    """Every page but the public ones (login, health, static) may show cost
    data: never store it in a shared or browser cache."""

    PUBLIC_PREFIXES = ("/static/", "/healthz", "/readyz")

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not request.path.startswith(self.PUBLIC_PREFIXES):
            response["Cache-Control"] = "private, no-store"
        return response


# --- sessions end when rights change ----------------------------------------------


def sessions_end(*, user_ids: set[int]) -> int:
    """Delete the live sessions of these users; returns how many ended."""
    if not user_ids:
        return 0
    wanted = {str(pk) for pk in user_ids}
    doomed = [
        session.pk
        for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator()
        if session.get_decoded().get("_auth_user_id") in wanted
    ]
    Session.objects.filter(pk__in=doomed).delete()
    return len(doomed)


def _groups_changed(
    sender: Any,
    instance: Any,
    action: str,
    reverse: bool,
    pk_set: set[int] | None,
    **_: Any,
) -> None:
    if action not in {"post_add", "post_remove", "pre_clear"}:
        return
    if isinstance(instance, User):
        sessions_end(user_ids={instance.pk})
    elif action == "pre_clear":  # group.user_set.clear(): members still listed
        sessions_end(user_ids=set(instance.user_set.values_list("pk", flat=True)))
    elif pk_set:  # group.user_set.add(...): the users are in pk_set
        sessions_end(user_ids=set(pk_set))


def connect_signals() -> None:
    m2m_changed.connect(
        _groups_changed, sender=User.groups.through, dispatch_uid="costapp-groups"
    )
