"""A user's saved views: a page of costapp with its window and filters
(its path and query string) under a name, to open again later.

Private: only their owner lists, opens, renames or deletes them; to show a
view to someone else, send its link (the query string holds the window).
Bounds, and why, are in ``costapp/saved_views/forms.py``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower

NAME_MAX = 100
PATH_MAX = 500
QUERY_MAX = 2000


class SavedView(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views"
    )
    name = models.CharField(max_length=NAME_MAX)
    # Decoded, as Django resolves it (``request.path``); quoted when linked.
    path = models.CharField(max_length=PATH_MAX)
    query = models.CharField(max_length=QUERY_MAX, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = [Lower("name"), "pk"]
        constraints = [
            # "Spend" and "spend" in one short list would be two lines that
            # read the same.
            models.UniqueConstraint(
                "user", Lower("name"), name="saved_view_name_unique_per_user"
            ),
        ]
        indexes = [models.Index(fields=["user", "-updated_at"])]

    def __str__(self) -> str:
        return self.name
