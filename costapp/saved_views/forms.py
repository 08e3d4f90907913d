"""The save and rename forms. Bounds, and why:

- ``name`` at most 100 characters, one line (``NamedErrors``' name rule),
  unique per user whatever its case: a list of views is read by name;
- ``path`` a data page of this site that the user's role opens
  (``pages.path_problem``): a saved view is a link the site shows its user,
  so it must never point elsewhere, nor at an action;
- ``query`` at most 2,000 characters (a link longer than that is cut by
  some proxies and browsers) and 200 parameters;
- at most 50 views per user (``services.MAX_PER_USER``): the top bar lists
  the last few and the list page all of them.
"""

from __future__ import annotations

from typing import Any

from django import forms

from costapp.api.forms import PlainIntegerField
from costapp.forms import NamedForm
from costapp.models.saved_views import NAME_MAX, PATH_MAX, QUERY_MAX
from costapp.saved_views.pages import path_problem, query_canonical
from costapp.saved_views.selectors import saved_views_of
from costapp.saved_views.services import (
    MAX_PER_USER,
    limit_message,
    name_taken_message,
)


class ViewNameForm(NamedForm):
    """A view's name, for the user whose views it is among."""

    name = forms.CharField(max_length=NAME_MAX, strip=True)

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user


class SaveViewForm(ViewNameForm):
    path = forms.CharField(max_length=PATH_MAX, widget=forms.HiddenInput)
    query = forms.CharField(
        max_length=QUERY_MAX, required=False, strip=False, widget=forms.HiddenInput
    )

    def clean_path(self) -> str:
        path: str = self.cleaned_data["path"]
        if problem := path_problem(path, self.user):
            raise forms.ValidationError(problem)
        return path

    def clean_query(self) -> str:
        try:
            query = query_canonical(self.cleaned_data.get("query") or "")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        if len(query) > QUERY_MAX:  # written again, a character may grow to %XX
            raise forms.ValidationError(
                f"at most {QUERY_MAX:,} characters once encoded (it has {len(query):,})"
            )
        return query

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        name = data.get("name")
        if name is None:
            return data
        # Said here for the page; the service checks again under a lock.
        if saved_views_of(user=self.user).count() >= MAX_PER_USER:
            self.add_error("name", limit_message(name))
        elif saved_views_of(user=self.user).filter(name__iexact=name).exists():
            self.add_error("name", name_taken_message(name))
        return data


class RenameForm(ViewNameForm):
    view = PlainIntegerField(min_value=1, max_value=2**62, widget=forms.HiddenInput)


class DeleteForm(NamedForm):
    view = PlainIntegerField(min_value=1, max_value=2**62, widget=forms.HiddenInput)
