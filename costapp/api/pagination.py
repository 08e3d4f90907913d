"""Page-number pagination with a bounded page size; a page past the end is
empty (not a 404), and a bad ``page`` or ``page_size`` is refused by name."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import QuerySet
from rest_framework.pagination import BasePagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param
from rest_framework.views import APIView

from analytics.errors import InvalidInput
from costapp.api.query import InvalidQuery
from costapp.validation import int_in

PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
MAX_PAGE = 100_000


class Pagination(BasePagination):
    def paginate_queryset(
        self,
        queryset: QuerySet[Any] | Sequence[Any],
        request: Request,
        view: APIView | None = None,
    ) -> list[Any]:
        errors: dict[str, list[str]] = {}
        values = {}
        for field, default, maximum in (
            ("page", 1, MAX_PAGE),
            ("page_size", PAGE_SIZE, MAX_PAGE_SIZE),
        ):
            raw = request.query_params.get(field)
            try:
                if raw is not None and raw != raw.strip():
                    # Read as sent (int_in, like a form, strips " 5"): the
                    # schema says an integer, not one padded with spaces.
                    raise InvalidInput(
                        field, raw, f"is not an integer between 1 and {maximum}"
                    )
                values[field] = (
                    default
                    if raw is None
                    else int_in(raw, field=field, minimum=1, maximum=maximum)
                )
            except InvalidInput as exc:
                errors[field] = [str(exc)]
        if errors:
            raise InvalidQuery(errors)
        self.request = request
        self.page, self.page_size = values["page"], values["page_size"]
        self.count = (
            queryset.count() if isinstance(queryset, QuerySet) else len(queryset)
        )
        first = (self.page - 1) * self.page_size
        return list(queryset[first : first + self.page_size])

    def _link(self, page: int) -> str:
        url = self.request.build_absolute_uri()
        if page == 1:
            return remove_query_param(url, "page")
        return replace_query_param(url, "page", page)

    def get_paginated_response(self, data: Any) -> Response:
        more = self.page * self.page_size < self.count
        return Response(
            {
                "count": self.count,
                "page": self.page,
                "page_size": self.page_size,
                "next": self._link(self.page + 1) if more else None,
                "previous": self._link(self.page - 1)
                if 1 < self.page <= (self.count - 1) // self.page_size + 2
                else None,
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "required": ["count", "page", "page_size", "next", "previous", "results"],
            "properties": {
                "count": {"type": "integer", "minimum": 0},
                "page": {"type": "integer", "minimum": 1},
                "page_size": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_PAGE_SIZE,
                },
                "next": {"type": "string", "format": "uri", "nullable": True},
                "previous": {"type": "string", "format": "uri", "nullable": True},
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return [
            {
                "name": "page",
                "in": "query",
                "required": False,
                "description": "Page number; a page past the end is empty.",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE},
            },
            {
                "name": "page_size",
                "in": "query",
                "required": False,
                "description": f"Rows per page (default {PAGE_SIZE}).",
                "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
            },
        ]
