"""Writes of saved views. Each refusal names the field and the value, as a
form's do; the bounds are checked again here, under a lock on the user's
row, so two saves at once cannot pass the limit together."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from analytics.errors import shown
from costapp.models import SavedView
from costapp.saved_views.selectors import saved_views_of

MAX_PER_USER = 50


class SavedViewRefused(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _name_taken(*, user: User, name: str, other_than: int | None = None) -> bool:
    found = saved_views_of(user=user).filter(name__iexact=name)
    if other_than is not None:
        found = found.exclude(pk=other_than)
    return found.exists()


def name_taken_message(name: str) -> str:
    return f"name={shown(name)}: you have a saved view of this name already"


def limit_message(name: str) -> str:
    return (
        f"name={shown(name)}: you keep {MAX_PER_USER} saved views, the most one "
        "user may; delete one first"
    )


@transaction.atomic
def saved_view_create(*, user: User, name: str, path: str, query: str) -> SavedView:
    """Save ``path``?``query`` (checked by the caller: ``SaveViewForm``)."""
    # One user's saves queue here: the count below is then the count at insert.
    User.objects.select_for_update().filter(pk=user.pk).exists()
    if saved_views_of(user=user).count() >= MAX_PER_USER:
        raise SavedViewRefused("name", limit_message(name))
    if _name_taken(user=user, name=name):
        raise SavedViewRefused("name", name_taken_message(name))
    try:
        with transaction.atomic():
            return SavedView.objects.create(
                user=user, name=name, path=path, query=query
            )
    except IntegrityError:  # the unique name, decided by the database's Lower()
        raise SavedViewRefused("name", name_taken_message(name)) from None


@transaction.atomic
def saved_view_rename(*, user: User, view_id: int, name: str) -> SavedView:
    """Rename one of the user's own views; ``SavedView.DoesNotExist`` for
    anyone else's (the page answers 404: it does not say it exists)."""
    view = saved_views_of(user=user).select_for_update().get(pk=view_id)
    if _name_taken(user=user, name=name, other_than=view.pk):
        raise SavedViewRefused("name", name_taken_message(name))
    view.name = name
    try:
        with transaction.atomic():
            view.save(update_fields=["name", "updated_at"])
    except IntegrityError:
        raise SavedViewRefused("name", name_taken_message(name)) from None
    return view


def saved_view_delete(*, user: User, view_id: int) -> SavedView | None:
    """Delete one of the user's own views and return it; None when it is not
    theirs (or gone already)."""
    view = saved_views_of(user=user).filter(pk=view_id).first()
    if view is not None:
        view.delete()
    return view
