"""Unit-economics pages: parse input -> read -> present -> render, nothing else
(the contexts are built in ``economics.present``)."""

from __future__ import annotations

from datetime import date, timedelta

import pandas as pd
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from analytics.unit_cost_figures import period_ends
from costapp import pagecache
from costapp.access import requires
from costapp.days import display_today
from costapp.economics import present
from costapp.economics.budgets import budget_upsert
from costapp.economics.figures import (
    budget_exists_read,
    explanation_read,
    flagged_read,
    pool_idle_read,
    scope_names_read,
    scope_windows_read,
)
from costapp.economics.forecasts.present import overview_month_context
from costapp.economics.forecasts.selectors import (
    budget_statuses_read,
    month_forecast_read,
)
from costapp.economics.forms import MAX_DAYS, BudgetForm, EconomicsWindowForm
from costapp.economics.idle.present import idle_cards_context, rightsizing_context
from costapp.economics.idle.rightsizing import HEADROOM_DAYS, rightsizing_read
from costapp.economics.idle.selectors import (
    idle_rows_read,
    idle_series_names_read,
)
from costapp.economics.moved import MovedForm, moved_read
from costapp.economics.selectors import overview_read
from costapp.filters import Filters, filters_read
from costapp.models import Deployment
from costapp.models.economics import FLEET
from costapp.telemetry.selectors import serving_health_read

DEFAULT_LABEL = "the 90 days before today"


def _economics_filters(
    request: HttpRequest,
    today: date,
    fields: tuple[str, ...] = ("grain", "clock"),
) -> tuple[EconomicsWindowForm, Filters]:
    """The shared filter (window preset, team, deployments) and the economics
    form (grain, clock), from one query string. Custom days are the economics
    form's (it bounds them per grain); a preset replaces them."""
    query = request.GET.copy()
    preset = query.get("preset") or "custom"
    if preset != "custom":
        query.pop("start", None)
        query.pop("end", None)
    form = EconomicsWindowForm(query or None, today=today)
    refused: list[str] = []
    if form.is_bound and not form.is_valid():
        # Refused (named, field and value): the page's own default window
        # for the whole fleet, saying so, as a refused filter does.
        refused = form.messages()
        form = EconomicsWindowForm(None, today=today)
    page = {"page_form": form, "page_fields": fields, "today": today}
    window = form.window()
    if refused:
        default = (window.start, window.end, DEFAULT_LABEL)
        return form, filters_read({}, default=default, refused=refused, **page)  # type: ignore[arg-type]
    named_days = "start" in request.GET or "end" in request.GET
    if preset == "custom" and form.is_bound and named_days:
        query["start"], query["end"] = window.start.isoformat(), window.end.isoformat()
    days = (window.end - window.start).days
    label = DEFAULT_LABEL if window.grain == "day" else f"the last {days} days"
    default = (window.start, window.end, label)
    filters = filters_read(
        query,
        default=default,
        max_days=MAX_DAYS.get(window.grain, max(MAX_DAYS.values())),
        **page,  # type: ignore[arg-type]
    )
    return form, filters


def _series(filters: Filters) -> tuple[str, list[str] | None, str]:
    """(scope, names, label) of the unit-cost series a scoped page charts:
    the team's stored figures, the chosen deployments', or the fleet's."""
    if filters.picked or (filters.team and filters.deployments == ()):
        return "deployment", list(filters.deployments or ()), "Chosen deployments"
    if filters.team:
        return "team", [filters.team], f"Team {filters.team}"
    return "fleet", None, "Fleet"


# The budgets page's month forecast is of the charted series in the rate
# card's currency.
FORECAST_CURRENCY = "USD"


@requires("costapp.view_overview")
def overview(request: HttpRequest) -> HttpResponse:
    today = display_today()
    form, filters = _economics_filters(
        request, today, fields=("grain", "clock", "refresh")
    )
    body = pagecache.body_render(
        request,
        OVERVIEW_BODY,
        page="overview",
        key=(filters.start, filters.end, filters.team, filters.deployments),
        context=lambda: _overview_context(today, form, filters),
    )
    refresh = form.cleaned_data.get("refresh") if form.is_bound else ""
    return render(
        request, "economics/overview.html", {"body": body, "refresh": refresh}
    )


OVERVIEW_BODY = "economics/_overview_body.html"


def _overview_context(
    today: date, form: EconomicsWindowForm, filters: Filters
) -> dict[str, object]:
    """Everything the overview's body shows: read only when the page cache
    has no body for this data, query string, day and rights."""
    window = form.window()
    start, end, grain = filters.start, filters.end, window.grain
    scope, names, series = _series(filters)
    flag_names = (
        None
        if filters.deployments is None
        else [*filters.deployments, *([filters.team] if filters.team else [])]
    )
    # Weeks and months carry no flags of their own: list their flagged days.
    flag_grain = "day" if grain in ("week", "month") else grain
    page = present.OverviewPage(
        form=form,
        filters=filters,
        grain=grain,
        scope=scope,
        series=series,
        overview=overview_read(today=end, days=(end - start).days, **filters.scope),
        windows=scope_windows_read(
            scope=scope,
            names=names,
            start=start,
            end=end,
            grain=grain,
            clock=window.clock,
        ),
        flags=flagged_read(start=start, end=end, grain=flag_grain, names=flag_names),
        # Month to date as of the window's last day (today at the latest),
        # as on the budgets page: ``today`` is exclusive there, as the
        # window's end is.
        month=overview_month_context(
            today=min(today, filters.end),
            team=filters.team,
            deployments=filters.deployments,
        ),
        pools=pool_idle_read(start=start, end=end, deployments=filters.deployments),
        idle_cards=idle_cards_context(start=start, end=end),
        today=today,
    )
    return present.overview_context(page)


@requires("costapp.view_unitcostfigure")
def explanation(request: HttpRequest, figure_id: int) -> HttpResponse:
    found = explanation_read(figure_id)
    if found is None:
        raise Http404("no such figure")
    filters = filters_read(request.GET, today=display_today())
    context = present.explanation_context(found, filters)
    f = found.figure
    deployment = (
        Deployment.objects.filter(name=f.name).first()
        if f.scope == "deployment"
        else None
    )
    if deployment is not None:
        # How the deployment served the same period, beside its 7 days
        # before: a cost move next to the latency, preemptions and KV cache
        # on-call sees in Prometheus.
        start = f.period_start
        end = period_ends(pd.DatetimeIndex([start]), f.grain)[0].to_pydatetime()
        context["serving"] = present.serving_rows(
            period=serving_health_read(deployment, start=start, end=end),
            before=serving_health_read(
                deployment, start=start - timedelta(days=7), end=start
            ),
            slo_ttft_ms=deployment.slo_ttft_p95_ms,
            slo_itl_ms=deployment.slo_itl_p95_ms,
        )
    return render(request, "economics/explanation.html", context)


@requires("costapp.view_budget", write="costapp.add_budget")
def budgets(request: HttpRequest) -> HttpResponse:
    # Budgets are monthly: the page shows the month of the window's last day,
    # as of that day (today at the latest).
    filters = filters_read(request.GET, default_preset="mtd")
    # As of the window's end (exclusive, as ``today`` is there): a window
    # ending with its month shows the month's bill, not a forecast of its
    # last day.
    today = min(display_today(), filters.end)
    form = BudgetForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        key = {k: data[k] for k in ("scope", "name", "currency")}
        # The page writes by upsert: a budget that exists is edited, which
        # is a right of its own (change_budget), beside adding one.
        if budget_exists_read(**key) and not request.user.has_perm(
            "costapp.change_budget"
        ):
            raise PermissionDenied
        budget_upsert(
            scope=data["scope"], name=data["name"],
            monthly_amount=data["monthly_amount"], currency=data["currency"],
        )  # fmt: skip
        messages.success(request, f"budget for {data['scope']} {data['name']} saved")
        return redirect("economics:budgets")
    scope, names, series = _series(filters)
    forecast_name = names[0] if names and len(names) == 1 else FLEET
    if forecast_name == FLEET:
        scope, series = "fleet", "Fleet"
    context = present.budgets_context(
        form=form,
        filters=filters,
        series=series,
        as_of=today - timedelta(days=1),
        statuses=budget_statuses_read(today=today),
        forecast=month_forecast_read(
            scope=scope, name=forecast_name, currency=FORECAST_CURRENCY, today=today
        ),
        currency=FORECAST_CURRENCY,
        can_write=request.user.has_perm("costapp.add_budget"),
        scope=scope,
    )
    return render(request, "economics/budgets.html", context)


@requires("costapp.view_overview")
def idle(request: HttpRequest) -> HttpResponse:
    """Idle in dollars, both kinds, per pool and deployment over a window,
    narrowed by the shared filter (a chosen deployment brings its pool)."""
    form, filters = _economics_filters(request, display_today())
    body = pagecache.body_render(
        request,
        IDLE_BODY,
        page="idle",
        key=(filters.start, filters.end, filters.team, filters.deployments),
        context=lambda: _idle_context(form, filters),
    )
    return render(request, "economics/idle.html", {"body": body})


IDLE_BODY = "economics/_idle_body.html"


@requires("costapp.view_overview")
def rightsizing(request: HttpRequest) -> HttpResponse:
    """Per deployment, the replicas its SLA needs at its busiest recent hour
    against the replicas that ran, and what the headroom cost."""
    found = rightsizing_read()
    return render(
        request,
        "economics/rightsizing.html",
        rightsizing_context(found, days=HEADROOM_DAYS),
    )


def _idle_context(form: EconomicsWindowForm, filters: Filters) -> dict[str, object]:
    """Read only when the page cache has no body for this data."""
    start, end = filters.start, filters.end
    return present.idle_context(
        form=form,
        filters=filters,
        rows=idle_rows_read(
            start=start, end=end, names=idle_series_names_read(filters.deployments)
        ),
        idle_cards=idle_cards_context(start=start, end=end),
    )


def _moved_input(
    request: HttpRequest, default_preset: str = "7d"
) -> tuple[Filters, str, list[str]]:
    """The shared window filter and the page's sort (refused: named, and the
    default order is shown)."""
    filters = filters_read(request.GET, default_preset=default_preset)
    form = MovedForm(request.GET or None)
    errors = form.messages() if form.is_bound and not form.is_valid() else []
    return filters, form.sort_key(), errors


@requires("costapp.view_overview")
def moved(request: HttpRequest) -> HttpResponse:
    """Every deployment, team and the fleet over the window's complete days
    against the period of the same length before it."""
    filters, sort, errors = _moved_input(request)
    found = moved_read(start=filters.start, end=filters.end, sort=sort, **filters.scope)
    context = present.moved_context(found, filters, sort=sort, errors=errors)
    return render(request, "economics/moved.html", context)


@requires("costapp.view_overview")
def moved_explanation(request: HttpRequest, scope: str, name: str) -> HttpResponse:
    """One series' move over any window, flagged or not."""
    if name not in scope_names_read().get(scope, []):
        raise Http404("no such series")
    filters, _, _ = _moved_input(request)
    found = moved_read(start=filters.start, end=filters.end, scope=scope, name=name)
    context = present.moved_explanation_context(found, filters)
    context |= {"scope": scope, "name": name}
    return render(request, "economics/moved_explanation.html", context)
