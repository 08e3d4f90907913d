from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone

from costapp.pipeline.selectors import FiguresBehind, figures_behind
from costapp.saved_views.selectors import TopBar, top_bar


def display(request: HttpRequest) -> dict[str, object]:
    def behind() -> FiguresBehind | None:
        # Called by the template only where it shows the note (one query).
        if not request.user.has_perm("costapp.view_unitcostfigure"):
            return None
        return figures_behind(now=timezone.now())

    def saved_views() -> TopBar | None:
        # Called by the top bar only (one query), outside any cached body.
        return top_bar(request)

    return {
        "DISPLAY_TIME_ZONE": settings.DISPLAY_TIME_ZONE,
        "DEMO": settings.COSTAPP_DEMO,
        "FIGURES_BEHIND": behind,
        "SAVED_VIEWS": saved_views,
    }
