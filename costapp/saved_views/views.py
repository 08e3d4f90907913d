"""The saved views pages: the list (open, rename, delete) and the save form.

Neither is cached: both are one user's own, and both carry forms with a
CSRF token. The link to the save form sits in the top bar (rendered per
request), never inside a cached page body.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from analytics.errors import shown
from costapp.access import requires
from costapp.models import SavedView
from costapp.models.saved_views import NAME_MAX
from costapp.saved_views.forms import DeleteForm, RenameForm, SaveViewForm
from costapp.saved_views.pages import link, name_suggested, page_of, query_summary
from costapp.saved_views.selectors import saved_view_rows
from costapp.saved_views.services import (
    MAX_PER_USER,
    SavedViewRefused,
    saved_view_create,
    saved_view_delete,
    saved_view_rename,
)

DELETE_RIGHT = "costapp.delete_savedview"


def _user(request: HttpRequest) -> User:
    user = request.user
    assert isinstance(user, User)  # requires() let only a signed-in reader in
    return user


@requires("costapp.view_savedview", write="costapp.change_savedview")
def saved_list(request: HttpRequest) -> HttpResponse:
    user = _user(request)
    errors: list[str] = []
    failed: int | None = None  # the row whose rename was refused, kept open
    status = 200
    if request.method == "POST":
        status = 400
        action = request.POST.get("action", "")
        if action == "delete":
            if not user.has_perm(DELETE_RIGHT):
                request.missing_permission = DELETE_RIGHT  # type: ignore[attr-defined]
                raise PermissionDenied
            delete = DeleteForm(request.POST)
            if delete.is_valid():
                gone = saved_view_delete(user=user, view_id=delete.cleaned_data["view"])
                if gone is None:
                    raise Http404("not one of your saved views")
                messages.success(request, f"Deleted the saved view “{gone.name}”.")
                return redirect("saved_views:list")
            errors = delete.messages()
        elif action == "rename":
            rename = RenameForm(request.POST, user=user)
            if rename.is_valid():
                try:
                    view = saved_view_rename(
                        user=user,
                        view_id=rename.cleaned_data["view"],
                        name=rename.cleaned_data["name"],
                    )
                except SavedView.DoesNotExist:
                    raise Http404("not one of your saved views") from None
                except SavedViewRefused as exc:
                    errors = [str(exc)]
                else:
                    messages.success(request, f"Renamed to “{view.name}”.")
                    return redirect("saved_views:list")
            else:
                errors = rename.messages()
            failed = rename.cleaned_data.get("view")
        else:
            errors = [f"action={shown(action)}: one of rename, delete"]
    return render(
        request,
        "saved_views/list.html",
        {
            "rows": saved_view_rows(user=user),
            "errors": errors,
            "failed": failed,
            "max_views": MAX_PER_USER,
            "name_max": NAME_MAX,
            "can_delete": user.has_perm(DELETE_RIGHT),
            "can_rename": user.has_perm("costapp.change_savedview"),
        },
        status=status,
    )


@requires("costapp.add_savedview", write="costapp.add_savedview")
def saved_new(request: HttpRequest) -> HttpResponse:
    user = _user(request)
    if request.method == "POST":
        form = SaveViewForm(request.POST, user=user)
        if form.is_valid():
            data = form.cleaned_data
            try:
                view = saved_view_create(
                    user=user, name=data["name"], path=data["path"], query=data["query"]
                )
            except SavedViewRefused as exc:
                form.add_error(exc.field, str(exc))
            else:
                messages.success(
                    request,
                    f"Saved “{view.name}”: open it again from Saved views at the top.",
                )
                return redirect(link(view.path, view.query))
        return _new_page(request, form, status=400)
    path = request.GET.get("path", "")
    query = request.GET.get("query", "")
    if not path:  # no page named: the address is typed (a link someone sent)
        return _new_page(request, SaveViewForm(user=user), status=200)
    if "?" in path and not query:  # a link typed by hand: path and query as one
        path, _, query = path.partition("?")
    page = page_of(path)
    name = name_suggested(page, query, limit=NAME_MAX) if page else ""
    form = SaveViewForm({"path": path, "query": query, "name": name}, user=user)
    form.is_valid()
    refused = bool({"path", "query"} & set(form.errors))
    return _new_page(request, form, status=400 if refused else 200)


def _new_page(request: HttpRequest, form: SaveViewForm, *, status: int) -> HttpResponse:
    """The form: for the page named, or with the address to type (none
    named, or the one named refused: it can be corrected there)."""
    path = str(form.data.get("path") or "")
    query = str(
        getattr(form, "cleaned_data", {}).get("query", form.data.get("query")) or ""
    )
    ok = form.is_bound and not ({"path", "query"} & set(form.errors))
    page = page_of(path) if ok else None
    return render(
        request,
        "saved_views/new.html",
        {
            "form": form,
            "page": page,
            "url": link(path, query) if page else "",
            "summary": query_summary(query) if page else "",
        },
        status=status,
    )
