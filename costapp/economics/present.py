"""Read results as strings for templates (templates only print strings): each
economics page's context, built from what its view read.

The rows and cards are shared by the economics pages and the deployment page
(fleet), so a figure reads the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any
from urllib.parse import urlencode

from analytics.forecast import MonthForecast
from costapp import formatting as fmt
from costapp.days import period_label
from costapp.economics import charts
from costapp.economics.figures import (
    DeploymentEconomics,
    Explanation,
    FigureRow,
    PoolIdle,
    ScopeWindow,
)
from costapp.economics.forecasts.selectors import BudgetStatus
from costapp.economics.forms import BudgetForm, EconomicsWindowForm
from costapp.economics.idle.present import idle_page_rows
from costapp.economics.idle.selectors import IdleRow
from costapp.economics.moved import Moved
from costapp.economics.selectors import DeploymentSummary, Kpi, Overview, Period
from costapp.filters import Filters
from costapp.models.economics import CLOCK_LABELS
from costapp.telemetry.selectors import ServingHealth

FLAG_LABELS = {
    "anomaly": "cost anomaly",
    "traffic": "traffic change (not an anomaly)",
    "size": "request size change",
    "saving": "saving (not an anomaly)",
    "check": "check data",
    "price": "known price change (not an anomaly)",
}
PARTIAL = "partial, not closed"


# --- rows and cards ----------------------------------------------------------------


def period(row: FigureRow) -> str:
    """The period's name; one still in progress (or read before it closed)
    says so: its figure will move, and it is not judged."""
    text = period_label(row.period_start, row.grain)
    return text if row.complete else f"{text} \N{MIDDLE DOT} {PARTIAL}"


def flag_row(row: FigureRow) -> dict[str, Any]:
    return {
        "pk": row.pk,
        "scope": row.scope,
        "name": row.name,
        "period": period(row),
        "flag": row.flag,
        "flag_label": FLAG_LABELS.get(row.flag, row.flag)
        if row.complete
        else f"{PARTIAL}: not judged yet",
        "clock": CLOCK_LABELS.get(row.clock, row.clock),
        "value": fmt.money_unit(row.cost_per_1k_requests, row.currency),
        "baseline": fmt.money_unit(row.baseline, row.currency),
        "band": f"{fmt.money_unit(row.lower, row.currency)} \N{EN DASH} "
        f"{fmt.money_unit(row.upper, row.currency)}",
        "cause": row.cause,
        "level_shift": row.level_shift,
        "currency": row.currency,
    }


def last_row(row: FigureRow | None, currency: str) -> dict[str, Any]:
    if row is None:
        return {"period": fmt.MISSING, "value": fmt.MISSING, "baseline": fmt.MISSING,
                "band": fmt.MISSING, "per_1m": fmt.MISSING,
                "per_1m_baseline": fmt.MISSING, "per_1m_band": fmt.MISSING,
                "clock": "", "flag": ""}  # fmt: skip
    return {
        "period": period(row),
        "value": fmt.money_unit(row.cost_per_1k_requests, currency),
        "per_1m": fmt.money_unit(row.cost_per_1m_tokens, currency),
        "per_1m_baseline": fmt.money_unit(row.baseline_per_1m_tokens, currency),
        "per_1m_band": f"{fmt.money_unit(row.lower_per_1m_tokens, currency)} "
        f"\N{EN DASH} {fmt.money_unit(row.upper_per_1m_tokens, currency)}",
        "baseline": fmt.money_unit(row.baseline, currency),
        "band": f"{fmt.money_unit(row.lower, currency)} \N{EN DASH} "
        f"{fmt.money_unit(row.upper, currency)}",
        "clock": CLOCK_LABELS.get(row.clock, row.clock),
        "flag": FLAG_LABELS.get(row.flag, ""),
        "pk": row.pk,
    }


def window_card(w: ScopeWindow) -> dict[str, Any]:
    return {
        "name": w.name,
        "scope": w.scope,
        "currency": w.currency,
        "cost": fmt.money(w.cost, w.currency),
        "requests": fmt.count_short(w.requests),
        "per_1k": fmt.money_unit(w.cost_per_1k_requests, w.currency),
        "per_1k_raw": repr(w.cost_per_1k_requests),
        "per_1m": fmt.money_unit(w.cost_per_1m_tokens, w.currency),
        "idle": fmt.money(w.idle_cost, w.currency),
        "last": last_row(w.last, w.currency),
        "flags": len(w.flagged),
        "clocks": ", ".join(CLOCK_LABELS.get(c, c) for c in w.clocks),
    }


def pool_row(p: PoolIdle) -> dict[str, Any]:
    return {
        "pool": p.pool,
        "currency": p.currency,
        "idle": fmt.money(p.idle_cost, p.currency),
        "idle_raw": repr(p.idle_cost),
        "cost": fmt.money(p.cost, p.currency),
        "share": fmt.percent(p.idle_share),
    }


def deployment_context(econ: DeploymentEconomics) -> dict[str, Any]:
    """What the deployment page shows of unit economics."""
    return {
        "window": window_card(econ.window) if econ.window else None,
        "pool": pool_row(econ.pool) if econ.pool else None,
        "flags": [flag_row(r) for r in econ.flagged],
    }


# --- the overview ------------------------------------------------------------------

KPI_TEXT: dict[str, Callable[[float, str], str]] = {
    "money": fmt.money,
    "money_unit": fmt.money_unit,
    "count": lambda value, _currency: fmt.count_short(value),
}
# The charted series' two unit costs, each against its baseline and band:
# (chart key suffix, unit in the title, figure field).
BANDS = (
    ("", "1k requests", "cost_per_1k_requests"),
    ("-tokens", "1M tokens", "cost_per_1m_tokens"),
)


@dataclass(frozen=True)
class OverviewPage:
    """What the overview's body shows, as its view read it."""

    form: EconomicsWindowForm
    filters: Filters
    grain: str
    scope: str  # of the charted series: fleet, team or deployment
    series: str  # the charted series' label
    overview: Overview
    windows: list[ScopeWindow]  # the charted series, one per currency
    flags: list[FigureRow]
    pools: list[PoolIdle]
    idle_cards: list[dict[str, Any]]
    month: dict[str, Any]  # the month card as strings (forecasts.present)
    today: date | None = None  # the display day: a window reaching it is partial


DIRECT = "direct: the deployments' allocated bill, idle and unallocated left out"
FULLY_LOADED = "fully loaded: with pool idle and the unallocated bill"


def clocks_text(clocks: tuple[str, ...]) -> str:
    return ", ".join(CLOCK_LABELS.get(c, c) for c in clocks) or fmt.MISSING


def period_context(p: Period, today: date | None) -> dict[str, Any]:
    """The cards' days, the equal days before them, their basis and clocks;
    a period reaching into today says it is partial."""
    plural = "s" if p.days != 1 else ""
    previous_last = p.start - timedelta(days=1)
    partial = today is not None and p.end > today
    return {
        "card_days": f"{p.days} day{plural}",
        "period_text": f"{p.start.isoformat()} to "
        f"{(p.end - timedelta(days=1)).isoformat()}",
        "previous_text": f"the {p.days} day{plural} before "
        f"({p.previous_start.isoformat()} to {previous_last.isoformat()})",
        "card_basis": DIRECT,
        "card_clocks": clocks_text(p.clocks),
        "previous_clocks": clocks_text(p.previous_clocks),
        "covered": p.covered,
        "current_short": p.covered < p.days,
        "previous_short": p.previous_covered < p.days,
        "previous_covered": p.previous_covered,
        "partial_today": f"includes today {today.isoformat()}: {PARTIAL}"
        if partial and today is not None
        else "",
    }


def overview_context(page: OverviewPage) -> dict[str, object]:
    data = page.overview
    return {
        **page.month,
        **period_context(data.period, page.today),
        "fully_loaded": FULLY_LOADED,
        "form": page.form,
        "filters": page.filters,
        "series": page.series,
        "start": page.filters.start,
        "end": page.filters.end,
        "grain": page.grain,
        "currency": data.currency,
        "kpis": [kpi_card(k, data.currency) for k in data.kpis],
        "rows": [deployment_row(s, data.currency) for s in data.deployments],
        "fleet": [window_card(w) for w in page.windows],
        "fleet_figures": band_figures(page),
        "fleet_keys": [
            f"{w.name}-{w.currency}{key}" for w in page.windows for key, _, _ in BANDS
        ],
        "pools": [pool_row(p) for p in page.pools],
        "idle_cards": page.idle_cards,
        "flags": [flag_row(r) for r in page.flags],
        "figure": charts.cost_per_1k_daily(data.days),
        "provisional": "provisional" in data.basis,
        "billed": "billed" in data.basis,
        "has_data": not data.days.empty,
    }


def kpi_card(k: Kpi, currency: str) -> dict[str, str]:
    text = KPI_TEXT[k.unit]
    return {
        "label": k.label,
        "value": text(k.value, currency),
        "value_raw": repr(k.value),
        "previous": text(k.previous, currency),
        "previous_raw": repr(k.previous),
        "change": fmt.percent(k.change, signed=True),
        # More requests is good news; a higher cost is not.
        "trend": fmt.trend_class(
            -k.change if k.unit == "count" else k.change, threshold=0.05
        ),
    }


def deployment_row(s: DeploymentSummary, currency: str) -> dict[str, Any]:
    """A deployment's last 7 days; the ``_raw`` values sort the table."""
    return {
        "name": s.name,
        "team": s.team,
        "gpu": s.gpu,
        "requests": fmt.count_short(s.requests_7d),
        "requests_raw": repr(s.requests_7d),
        "cost": fmt.money(s.cost_7d, currency),
        "cost_raw": repr(s.cost_7d),
        "per_1k": fmt.money_unit(s.cost_per_1k_7d, currency),
        "per_1k_raw": repr(s.cost_per_1k_7d),
        "last": last_row(s.last, currency),
        "flags": s.flags,
        "per_1m": fmt.money_unit(s.cost_per_1m_tokens_7d, currency),
        "per_1m_raw": repr(s.cost_per_1m_tokens_7d),
        "gpu_hours": fmt.number(s.gpu_hours_7d),
        "gpu_hours_raw": repr(s.gpu_hours_7d),
        "truncation": fmt.percent(s.truncation_share),
        "truncation_raw": repr(s.truncation_share),
    }


def band_figures(page: OverviewPage) -> dict[str, dict[str, Any]]:
    """Each charted series' unit costs against their baselines, by key."""
    # A team's or the fleet's figures carry idle and unallocated dollars too.
    pooled = page.scope != "deployment"
    return {
        f"{w.name}-{w.currency}{key}": charts.baseline_band(
            w.figures,
            title=f"{page.series if pooled else w.name} {w.currency} per {unit}"
            f"{' (fully loaded)' if pooled else ''}, "
            f"by {page.grain}, against its baseline",
            currency=w.currency,
            field=field,
        )
        for w in page.windows
        for key, unit, field in BANDS
    }


# --- the explanation, budgets and idle pages ---------------------------------------


def explanation_context(found: Explanation, filters: Filters) -> dict[str, Any]:
    f, cur = found.figure, found.figure.currency
    # The filter bar sends to the overview; here it narrows the members.
    members = [
        m
        for m in found.members
        if filters.deployments is None or m.name in filters.deployments
    ]
    return {
        "filters": filters,
        "f": flag_row(f),
        "figure": f,
        "parts": [
            {"key": k, "label": label, "value": fmt.money_unit(v, cur), "raw": repr(v)}
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
        "members": [flag_row(m) | {"cost": fmt.money(m.cost, cur)} for m in members],
        "deployment_page": f.scope == "deployment",
    }


def serving_rows(
    *,
    period: ServingHealth,
    before: ServingHealth,
    slo_ttft_ms: float | None,
    slo_itl_ms: float | None,
) -> list[dict[str, str]]:
    """The explanation's "how it served" table: the period beside the 7 days
    before it, each figure with its unit; unmeasured figures are missing (fmt.MISSING), never 0."""

    def ms(value: float | None) -> str:
        return fmt.MISSING if value is None else f"{fmt.number(value * 1000, 0)} ms"

    def share(value: float | None) -> str:
        return fmt.percent(value)

    def slo(value: float | None) -> str:
        return f"p95 at most {fmt.number(value, 0)} ms" if value else fmt.MISSING

    rows = [
        ("ttft", "Time to first token, p95", ms, "ttft_p95_s", slo(slo_ttft_ms)),
        ("itl", "Inter-token latency, p95", ms, "itl_p95_s", slo(slo_itl_ms)),
        ("preemptions", "Preemptions per 1k requests",
         lambda v: fmt.number(v, 2), "preemptions_per_1k", "none (vLLM preempts on a full KV cache)"),
        ("kv_mean", "KV cache in use, mean of hours", share, "kv_cache_usage_mean", fmt.MISSING),
        ("kv_max", "KV cache in use, highest", share, "kv_cache_usage_max", fmt.MISSING),
        ("waiting", "Requests waiting, mean of hours",
         lambda v: fmt.number(v, 1), "waiting_mean", fmt.MISSING),
    ]  # fmt: skip
    return [
        {
            "key": key,
            "label": label,
            "period": show(getattr(period, attr)),
            "before": show(getattr(before, attr)),
            "slo": target,
        }
        for key, label, show, attr, target in rows
    ]


def budgets_context(
    *,
    form: BudgetForm,
    filters: Filters,
    series: str,
    as_of: date,
    statuses: list[BudgetStatus],
    forecast: MonthForecast | None,
    currency: str,
    can_write: bool,
    scope: str = "fleet",
) -> dict[str, Any]:
    """The budgets page: the filter's budgets and the charted series' month
    forecast (``forecast``, in ``currency``)."""
    return {
        "form": form,
        "filters": filters,
        "series": series,
        # A deployment's spend is direct; a team's and the fleet's fully loaded.
        "basis": "direct" if scope == "deployment" else "fully loaded",
        "as_of": as_of,
        "rows": [budget_row(s) for s in statuses if _kept(s, filters)],
        "fleet": forecast_card(forecast, currency) if forecast else None,
        "currency": currency,
        "can_write": can_write,
    }


def _kept(status: BudgetStatus, filters: Filters) -> bool:
    """Whether the filter keeps a budget: a chosen team's or deployment's."""
    b = status.budget
    return filters.deployments is None or (
        (b.scope == "team" and b.name == filters.team)
        or (b.scope == "deployment" and b.name in filters.deployments)
    )


def budget_row(status: BudgetStatus) -> dict[str, Any]:
    b, fc, cur = status.budget, status.forecast, status.budget.currency
    return {
        "currency": cur,
        "scope": b.scope,
        "name": b.name,
        "amount": fmt.money(b.monthly_amount, cur),
        "to_date": fmt.money(fc.to_date, cur) if fc else fmt.MISSING,
        "spent": fmt.percent(status.spent_share),
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
        "method": fmt.forecast_method(fc.method) if fc else "",
    }


def forecast_card(forecast: MonthForecast, currency: str) -> dict[str, Any]:
    return {
        "month": forecast.month.strftime("%B %Y"),
        "as_of": forecast.as_of.strftime("%Y-%m-%d"),
        "to_date": fmt.money(forecast.to_date, currency),
        "point": fmt.money(forecast.point, currency),
        "lower": fmt.money(forecast.lower, currency),
        "upper": fmt.money(forecast.upper, currency),
        "remaining": forecast.remaining_days,
        "method": fmt.forecast_method(forecast.method),
    }


def idle_context(
    *,
    form: EconomicsWindowForm,
    filters: Filters,
    rows: list[IdleRow],
    idle_cards: list[dict[str, Any]],
) -> dict[str, object]:
    return {
        "form": form,
        "filters": filters,
        "start": filters.start,
        "end": filters.end,
        "rows": idle_page_rows(rows),
        "idle_cards": idle_cards,
    }


# --- what moved (economics.moved) ------------------------------------------------

MOVED_PARTS = (
    ("price", "price"),
    ("fleet", "fleet"),
    ("traffic", "traffic"),
    ("size", "size"),
    ("clock", "clock"),
)
MOVED_SORTS = ("scope", "name", "spend", "spend_change", "u", "change",
               *(k for k, _ in MOVED_PARTS))  # fmt: skip
MOVED_SPEND_PARTS = (
    ("spend_price", "price ($ per GPU-hour)"),
    ("spend_fleet", "fleet (GPU-hours)"),
    ("spend_clock", "clock (bill or rate card)"),
)


def _raw(value: object) -> str:
    """A figure for a data-value attribute: its repr, or "" where missing."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return repr(float(value))  # type: ignore[arg-type]


def moved_row(row: dict[str, Any], query: str) -> dict[str, Any]:
    cur = row["currency"]
    clocks = row["clocks"] or fmt.MISSING
    if row["clocks_b"] != row["clocks"]:
        clocks = f"{row['clocks_b'] or fmt.MISSING} → {clocks}"
    return {
        "scope": row["scope"],
        "name": row["name"],
        "currency": cur,
        "spend": fmt.money(row["spend"], cur),
        "spend_b": fmt.money(row["spend_b"], cur),
        "spend_change": fmt.money(row["spend_change"], cur),
        "u": fmt.money_unit(row["u"], cur),
        "u_b": fmt.money_unit(row["u_b"], cur),
        "change": fmt.money_unit(row["change"], cur),
        "change_raw": _raw(row["change"]),
        "parts": [
            {"key": k, "value": fmt.money_unit(row[k], cur), "raw": _raw(row[k])}
            for k, _ in MOVED_PARTS
        ],
        "clocks": clocks,
        "reason": row["reason"],
        "days": row["days"],
        "days_b": row["days_b"],
        "missing": row["days_missing"] + row["days_missing_b"],
        "query": query,
    }


def moved_context(
    found: Moved, filters: Filters, *, sort: str, errors: list[str]
) -> dict[str, Any]:
    """The "what moved" page: one row per series, sorted by ``sort``."""
    query = urlencode(
        [("start", found.start.isoformat()), ("end", found.end.isoformat())]
    )
    rows = [moved_row(r, query) for r in found.rows.to_dict("records")]
    here = [(k, v) for k, v in filters.params() if k not in ("start", "end")]
    here += [("start", found.start.isoformat()), ("end", found.asked_end.isoformat())]
    return {
        "filters": filters,
        "found": found,
        "rows": rows,
        "sort": sort,
        "sorts": {
            c: urlencode([*here, ("sort", f"-{c}" if sort == c else c)])
            for c in MOVED_SORTS
        },
        "errors": errors,
        "last_day": found.end - timedelta(days=1),
        "before_last_day": found.before_end - timedelta(days=1),
        "parts": MOVED_PARTS,
    }


def moved_explanation_context(found: Moved, filters: Filters) -> dict[str, Any]:
    """One series' move over any window: the rows of ``moved_context`` and
    the spend's parts."""
    records = found.rows.to_dict("records")
    row = records[0] if records else None
    cur = row["currency"] if row else "USD"
    return {
        "currency": cur,
        "filters": filters,
        "found": found,
        "row": moved_row(row, "") if row else None,
        "others": [moved_row(r, "") for r in records[1:]],  # other currencies
        "spend_parts": [
            {
                "key": k,
                "label": label,
                "value": fmt.money(row[k], cur),
                "raw": _raw(row[k]),
            }
            for k, label in MOVED_SPEND_PARTS
            if row is not None
        ],
        "spend_change_raw": _raw(row["spend_change"]) if row else "",
        "last_day": found.end - timedelta(days=1),
        "before_last_day": found.before_end - timedelta(days=1),
        "parts": [
            p | {"label": label}
            for p, label in zip(
                moved_row(row, "")["parts"] if row else [],
                MOVED_PART_LABELS,
                strict=False,
            )
        ],
    }


MOVED_PART_LABELS = (
    "price ($ per GPU-hour, rate card)",
    "fleet (GPU-hours)",
    "traffic (tokens)",
    "request size (tokens per request)",
    "clock (bill against rate card where the clocks differ; else 0)",
)
