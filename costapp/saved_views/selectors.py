"""Reads of a user's saved views: the list page and the top bar."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse

from costapp.models import SavedView
from costapp.saved_views.pages import SAVABLE, link, page_of, query_summary

TOP_BAR_RECENT = 8  # the top bar's short list; the list page has all


@dataclass(frozen=True)
class SavedViewRow:
    pk: int
    name: str
    url: str
    page: str  # the page's name, "" when no page is at the path any more
    summary: str
    opens: bool  # the user's role still opens the page
    view: SavedView


def saved_views_of(*, user: Any) -> QuerySet[SavedView]:
    return SavedView.objects.filter(user=user)


def saved_view_rows(*, user: Any) -> list[SavedViewRow]:
    """Every saved view of ``user``, by name, with what it opens and whether
    the user may still open it (a role can change after a save)."""
    rows = []
    for view in saved_views_of(user=user):
        page = page_of(view.path)
        rows.append(
            SavedViewRow(
                pk=view.pk,
                name=view.name,
                url=link(view.path, view.query),
                page=page.label if page else "",
                summary=query_summary(view.query),
                opens=page is not None
                and (page.right is None or user.has_perm(page.right)),
                view=view,
            )
        )
    return rows


def saved_views_recent(*, user: Any, limit: int = TOP_BAR_RECENT) -> list[SavedViewRow]:
    """The last saved or renamed, for the top bar (one query)."""
    views = saved_views_of(user=user).order_by("-updated_at", "-pk")[:limit]
    return [
        SavedViewRow(
            pk=v.pk,
            name=v.name,
            url=link(v.path, v.query),
            page="",
            summary=query_summary(v.query),
            opens=True,
            view=v,
        )
        for v in views
    ]


@dataclass(frozen=True)
class TopBar:
    """The top bar's saved views: the last few, and the link that saves the
    page being looked at ("" where it cannot be saved)."""

    recent: list[SavedViewRow]
    save_url: str


def top_bar(request: HttpRequest) -> TopBar | None:
    """For the top bar, rendered on every request (never inside a cached
    body): None for a user without saved views' right."""
    user = request.user
    if not user.is_authenticated or not user.has_perm("costapp.view_savedview"):
        return None
    save_url = ""
    match = request.resolver_match
    if (
        match is not None
        and match.view_name in SAVABLE
        and request.method in ("GET", "HEAD")
        and user.has_perm("costapp.add_savedview")
    ):
        page = page_of(request.path_info)
        if page is not None and (page.right is None or user.has_perm(page.right)):
            # What the page was asked with, as the page cache keys it.
            wanted = {"path": request.path_info, "query": request.GET.urlencode()}
            save_url = f"{reverse('saved_views:new')}?{urlencode(wanted)}"
    return TopBar(saved_views_recent(user=user), save_url)
