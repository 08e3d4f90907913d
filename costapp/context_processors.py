from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def display(request: HttpRequest) -> dict[str, object]:
    return {
        "DISPLAY_TIME_ZONE": settings.DISPLAY_TIME_ZONE,
        "DEMO": settings.COSTAPP_DEMO,
    }
