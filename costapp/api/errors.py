"""Error bodies and the schema's scope."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from costapp.api.query import InvalidQuery


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler; a refused query also lists, per parameter, messages
    naming it and its value."""
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, InvalidQuery):
        response.data = {"detail": str(exc.detail), "errors": exc.errors}
    return response


def only_v1(endpoints: list[tuple[Any, ...]], **_: Any) -> list[tuple[Any, ...]]:
    """drf-spectacular preprocessing hook: the schema covers /api/v1/ data
    endpoints, not the schema endpoint itself."""
    return [
        e for e in endpoints if e[0].startswith("/api/v1/") and "schema" not in e[0]
    ]
