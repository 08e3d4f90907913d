"""Unit-economics pages: load -> form -> selector -> render, nothing else."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from costapp import formatting as fmt
from costapp import pagecache
from costapp.access import requires
from costapp.days import display_today
from costapp.economics import charts, present
from costapp.economics.figures import (
    explanation_read,
    flagged_read,
    pool_idle_read,
    scope_windows_read,
)
from costapp.economics.forecasts import budget_statuses_read, month_forecast_read
from costapp.economics.forms import MAX_DAYS, BudgetForm, EconomicsWindowForm
from costapp.economics.idle_selectors import (
    idle_cards_read,
    idle_page_rows,
    idle_rows_read,
    idle_series_names,
)
from costapp.economics.month import overview_month_context
from costapp.economics.selectors import overview_read
from costapp.economics.services import budget_upsert
from costapp.filters import Filters, filters_read
from costapp.models.economics import FLEET

_KPI_FORMAT: dict[str, Callable[[float], str]] = {
    "usd": fmt.usd,
    "usd_unit": fmt.usd_unit,
    "count": fmt.count_short,
}


DEFAULT_LABEL = "the 90 days before today"


def _economics_filters(
    request: HttpRequest, today: date
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
    page = {"page_form": form, "page_fields": ("grain", "clock"), "today": today}
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


# The fleet's two unit costs, each against its baseline and band.
FLEET_BANDS = (
    ("", "1k requests", "cost_per_1k_requests"),
    ("-tokens", "1M tokens", "cost_per_1m_tokens"),
)


@requires("costapp.view_overview")
def overview(request: HttpRequest) -> HttpResponse:
    today = display_today()
    form, filters = _economics_filters(request, today)
    body = pagecache.body_render(
        request,
        OVERVIEW_BODY,
        page="overview",
        key=(filters.start, filters.end, filters.team, filters.deployments),
        context=lambda: _overview_context(today, form, filters),
    )
    return render(request, "economics/overview.html", {"body": body})


OVERVIEW_BODY = "economics/_overview_body.html"


def _overview_context(
    today: date, form: EconomicsWindowForm, filters: Filters
) -> dict[str, object]:
    """Everything the overview's body shows: read only when the page cache
    has no body for this data, query string, day and rights."""
    window = form.window()
    start, end, grain = filters.start, filters.end, window.grain
    data = overview_read(today=end, days=(end - start).days, **filters.scope)
    scope, names, series = _series(filters)
    fleet = scope_windows_read(
        scope=scope, names=names, start=start, end=end, grain=grain, clock=window.clock
    )
    kpis = [
        {
            "label": k.label,
            "value": _KPI_FORMAT[k.unit](k.value),
            "previous": _KPI_FORMAT[k.unit](k.previous),
            "change": fmt.percent(k.change, signed=True),
            # More requests is good news; a higher cost is not.
            "trend": fmt.trend_class(
                -k.change if k.unit == "count" else k.change, threshold=0.05
            ),
        }
        for k in data.kpis
    ]
    rows = []
    for s in data.deployments:
        rows.append(
            {
                "name": s.name,
                "team": s.team,
                "gpu": s.gpu,
                "requests": fmt.count_short(s.requests_7d),
                "requests_raw": repr(s.requests_7d),
                "cost": fmt.usd(s.cost_7d),
                "cost_raw": repr(s.cost_7d),
                "per_1k": fmt.usd_unit(s.cost_per_1k_7d),
                "per_1k_raw": repr(s.cost_per_1k_7d),
                "last": present.last_row(s.last, "USD"),
                "flags": s.flags,
                "per_1m": fmt.usd_unit(s.cost_per_1m_tokens_7d),
                "per_1m_raw": repr(s.cost_per_1m_tokens_7d),
                "gpu_hours": fmt.number(s.gpu_hours_7d),
                "gpu_hours_raw": repr(s.gpu_hours_7d),
                "truncation": fmt.percent(s.truncation_share),
                "truncation_raw": repr(s.truncation_share),
            }
        )
    flag_names = (
        None
        if filters.deployments is None
        else [*filters.deployments, *([filters.team] if filters.team else [])]
    )
    # Weeks and months carry no flags of their own: list their flagged days.
    flag_grain = "day" if grain in ("week", "month") else grain
    flags = flagged_read(start=start, end=end, grain=flag_grain, names=flag_names)
    return {
        # Month to date as of the window's last day (today at the latest),
        # as on the budgets page: ``today`` is exclusive there, as the
        # window's end is.
        **overview_month_context(
            today=min(today, filters.end),
            team=filters.team,
            deployments=filters.deployments,
        ),
        "form": form,
        "filters": filters,
        "series": series,
        "start": start,
        "end": end,
        "grain": grain,
        "kpis": kpis,
        "rows": rows,
        "fleet": [present.window_card(w) for w in fleet],
        "fleet_figures": {
            f"{w.name}-{w.currency}{key}": charts.baseline_band(
                w.figures,
                title=f"{series if scope != 'deployment' else w.name} "
                f"{w.currency} per {unit}"
                f"{' (fully loaded)' if scope != 'deployment' else ''}, "
                f"by {grain}, against its baseline",
                currency=w.currency,
                field=field,
            )
            for w in fleet
            for key, unit, field in FLEET_BANDS
        },
        "fleet_keys": [
            f"{w.name}-{w.currency}{key}" for w in fleet for key, _, _ in FLEET_BANDS
        ],
        "pools": [
            present.pool_row(p)
            for p in pool_idle_read(
                start=start, end=end, deployments=filters.deployments
            )
        ],
        "idle_cards": idle_cards_read(start=start, end=end),
        "flags": [present.flag_row(r) for r in flags],
        "figure": charts.cost_per_1k_daily(data.days),
        "provisional": "provisional" in data.basis,
        "billed": "billed" in data.basis,
        "has_data": not data.days.empty,
    }


@requires("costapp.view_unitcostfigure")
def explanation(request: HttpRequest, figure_id: int) -> HttpResponse:
    found = explanation_read(figure_id)
    if found is None:
        raise Http404("no such figure")
    f = found.figure
    cur = f.currency
    # The filter bar sends to the overview; here it narrows the members.
    filters = filters_read(request.GET, today=display_today())
    members = [
        m
        for m in found.members
        if filters.deployments is None or m.name in filters.deployments
    ]
    return render(
        request,
        "economics/explanation.html",
        {
            "filters": filters,
            "f": present.flag_row(f),
            "figure": f,
            "parts": [
                {
                    "key": k,
                    "label": label,
                    "value": fmt.money_unit(v, cur),
                    "raw": repr(v),
                }
                for k, label, v in found.parts
            ],
            "total": fmt.money_unit(found.total, cur),
            "total_raw": repr(found.total),
            "delta": fmt.money_unit(found.delta, cur),
            "delta_raw": repr(found.delta),
            "efficiency": fmt.money_unit(found.efficiency, cur)
            if found.efficiency is not None
            else None,
            "cost": fmt.money(f.cost, cur),
            "gpu_hours": fmt.number(f.gpu_hours),
            "requests": fmt.count_short(f.requests),
            "tokens": fmt.count_short(f.tokens),
            "replicas": fmt.number(f.replicas),
            "idle": fmt.money(f.idle_cost, cur),
            "members": [
                present.flag_row(m) | {"cost": fmt.money(m.cost, cur)} for m in members
            ],
            "deployment_page": f.scope == "deployment",
        },
    )


@requires("costapp.view_budget", write="costapp.add_budget")
def budgets(request: HttpRequest) -> HttpResponse:
    # Budgets are monthly: the page shows the month of the window's last day,
    # as of that day (today at the latest).
    filters = filters_read(request.GET, default_preset="mtd")
    today = min(display_today(), filters.last_day)
    form = BudgetForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        budget_upsert(
            scope=data["scope"], name=data["name"],
            monthly_amount=data["monthly_amount"], currency=data["currency"],
        )  # fmt: skip
        messages.success(request, f"budget for {data['scope']} {data['name']} saved")
        return redirect("economics:budgets")
    statuses = budget_statuses_read(today=today)
    scope, names, series = _series(filters)
    forecast_name = names[0] if names and len(names) == 1 else FLEET
    if forecast_name == FLEET:
        scope, series = "fleet", "Fleet"
    fleet = month_forecast_read(
        scope=scope, name=forecast_name, currency="USD", today=today
    )
    rows = []
    for s in statuses:
        b, fc = s.budget, s.forecast
        if filters.deployments is not None and not (
            (b.scope == "team" and b.name == filters.team)
            or (b.scope == "deployment" and b.name in filters.deployments)
        ):
            continue
        cur = b.currency
        rows.append(
            {
                "scope": b.scope,
                "name": b.name,
                "amount": fmt.money(b.monthly_amount, cur),
                "to_date": fmt.money(fc.to_date, cur) if fc else fmt.MISSING,
                "spent": fmt.percent(s.spent_share),
                "burn_rate": fmt.money(fc.burn_rate, cur) if fc else fmt.MISSING,
                "point": fmt.money(fc.point, cur) if fc else fmt.MISSING,
                "interval": f"{fmt.money(fc.lower, cur)} \N{EN DASH} {fmt.money(fc.upper, cur)}"
                if fc
                else fmt.MISSING,
                "share": fmt.percent(fc.budget_share) if fc else fmt.MISSING,
                "runs_out": fc.budget_burn_date.strftime("%Y-%m-%d")
                if fc and fc.budget_burn_date is not None
                else "not this month",
                "over": bool(fc and fc.budget_share and fc.budget_share > 1),
                "method": fc.method if fc else "",
            }
        )
    return render(
        request,
        "economics/budgets.html",
        {
            "form": form,
            "filters": filters,
            "series": series,
            "as_of": today,
            "rows": rows,
            "fleet": {
                "month": fleet.month.strftime("%B %Y"),
                "as_of": fleet.as_of.strftime("%Y-%m-%d"),
                "to_date": fmt.usd(fleet.to_date),
                "point": fmt.usd(fleet.point),
                "lower": fmt.usd(fleet.lower),
                "upper": fmt.usd(fleet.upper),
                "remaining": fleet.remaining_days,
                "method": fleet.method,
            }
            if fleet
            else None,
            "can_write": request.user.has_perm("costapp.add_budget"),
        },
    )


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


def _idle_context(form: EconomicsWindowForm, filters: Filters) -> dict[str, object]:
    start, end = filters.start, filters.end
    rows = idle_rows_read(
        start=start, end=end, names=idle_series_names(filters.deployments)
    )
    return {
        "form": form,
        "filters": filters,
        "start": start,
        "end": end,
        "rows": idle_page_rows(rows),
        "idle_cards": idle_cards_read(start=start, end=end),
    }
