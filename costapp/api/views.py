"""Thin API views: validate the query, call a selector, serialize a page.

Each endpoint needs the same right as the page that shows the same figures
(``required_permission``), checked on the token's user: a token never reads
more than its user's role may.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from drf_spectacular.views import SpectacularJSONAPIView
from rest_framework import generics, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from costapp.api import query as q
from costapp.api import selectors
from costapp.api import serializers as s
from costapp.api.auth import BearerTokenAuthentication, HasPermission
from costapp.api.pagination import Pagination
from costapp.days import display_today
from costapp.economics.idle.rightsizing import rightsizing_read

ERRORS = {
    400: OpenApiResponse(s.QueryProblem, description="a query parameter was refused"),
    401: OpenApiResponse(s.Problem, description="no token, or revoked or expired"),
    403: OpenApiResponse(s.Problem, description="the token's role may not read this"),
}


def documented(
    *,
    query: type[serializers.Serializer] | None,
    response: Any,
    summary: str,
    right: str,
) -> Any:
    return extend_schema(
        parameters=[query] if query is not None else [],
        responses={200: response, **ERRORS},
        summary=summary,
        description=f"Needs the `{right}` right (costapp/roles.py) and the `api` scope.",
    )


class ReadView(generics.ListAPIView):  # type: ignore[type-arg]
    authentication_classes = [BearerTokenAuthentication]
    permission_classes = [HasPermission]
    pagination_class = Pagination
    required_permission: ClassVar[str]
    query_class: ClassVar[type[serializers.Serializer]]

    def rows(self, **params: Any) -> Any:
        raise NotImplementedError

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        params = q.validated(self.query_class, request)
        page = self.paginate_queryset(self.rows(**params))
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


class UnitCosts(ReadView):
    required_permission = "costapp.view_unitcostfigure"
    query_class = q.FigureQuery
    serializer_class: type[serializers.Serializer] = s.UnitCost

    @documented(query=q.FigureQuery, response=s.UnitCost(many=True),
                summary="Stored unit costs per series and period",
                right=required_permission)  # fmt: skip
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def rows(self, **params: Any) -> Any:
        return selectors.figures_read(**params)


class Baselines(UnitCosts):
    serializer_class = s.Baseline

    @documented(query=q.FigureQuery, response=s.Baseline(many=True),
                summary="Each period's unit cost with its baseline band and flag",
                right=UnitCosts.required_permission)  # fmt: skip
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)


class Spend(ReadView):
    required_permission = "costapp.view_bills"
    query_class = q.SpendQuery
    serializer_class = s.SpendDay

    @documented(query=q.SpendQuery, response=s.SpendDay(many=True),
                summary="Daily bill and provisional spend per deployment",
                right=required_permission)  # fmt: skip
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def rows(self, **params: Any) -> Any:
        return selectors.spend_days_read(**params)


class Idle(ReadView):
    required_permission = "costapp.view_unitcostfigure"
    query_class = q.PoolQuery
    serializer_class = s.PoolIdleDay

    @documented(query=q.PoolQuery, response=s.PoolIdleDay(many=True),
                summary="Idle dollars per pool and day (paid GPU-hours no replica used)",
                right=required_permission)  # fmt: skip
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def rows(self, **params: Any) -> Any:
        return selectors.pool_idle_read(**params)


class Moved(ReadView):
    required_permission = "costapp.view_overview"
    query_class = q.MovedQuery
    serializer_class = s.Moved

    @documented(query=q.MovedQuery, response=s.Moved(many=True),
                summary="What moved: each series against the period before, in parts",
                right=required_permission)  # fmt: skip
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def rows(self, **params: Any) -> Any:
        return selectors.moved_rows_read(**params)


class Overview(ReadView):
    required_permission = "costapp.view_overview"
    query_class = q.OverviewQuery
    serializer_class = s.OverviewCard

    @documented(query=q.OverviewQuery, response=s.OverviewCard(many=True),
                summary="The overview's cards against the equal days before them",
                right=required_permission)  # fmt: skip
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def rows(self, **params: Any) -> Any:
        return selectors.overview_cards_read(**params)


class NoQuery(serializers.Serializer):
    pass


class Rightsizing(ReadView):
    required_permission = "costapp.view_overview"
    query_class = NoQuery
    serializer_class = s.Rightsizing

    @documented(query=None, response=s.Rightsizing(many=True),
                summary="Replicas the SLA needs at each deployment's peak hour against "
                        "those that ran, and what the headroom cost",
                right=required_permission)  # fmt: skip
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def rows(self, **params: Any) -> Any:
        return rightsizing_read()


class Budgets(ReadView):
    required_permission = "costapp.view_budget"
    query_class = NoQuery
    serializer_class = s.BudgetStatus

    @documented(query=None, response=s.BudgetStatus(many=True),
                summary="Monthly budgets with spend to date and the month-end forecast",
                right=required_permission)  # fmt: skip
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def rows(self, **params: Any) -> Any:
        return selectors.budgets_read(today=display_today(timezone.now()))


class AlertEvents(ReadView):
    required_permission = "costapp.view_alertrule"
    query_class = q.EventQuery
    serializer_class = s.AlertEvent

    @documented(query=q.EventQuery, response=s.AlertEvent(many=True),
                summary="Alert events (firing, repeat, resolved), newest first",
                right=required_permission)  # fmt: skip
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def rows(self, **params: Any) -> Any:
        return selectors.alert_events_read(**params)


class ActiveAlerts(ReadView):
    required_permission = "costapp.view_alertrule"
    query_class = NoQuery
    serializer_class = s.ActiveAlert

    @documented(query=None, response=s.ActiveAlert(many=True),
                summary="Alerts pending or firing now",
                right=required_permission)  # fmt: skip
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def rows(self, **params: Any) -> Any:
        return selectors.active_alerts_read()


class Schema(SpectacularJSONAPIView):
    """The OpenAPI schema for token holders (the page /api/schema/ serves the
    same to a logged-in session)."""

    authentication_classes = [BearerTokenAuthentication]
    permission_classes = [HasPermission]
    required_permission = "costapp.view_overview"
