"""The overview's month card as strings for ``economics/_month_card.html``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from costapp import formatting as fmt
from costapp.economics.forecasts.selectors import MonthCard, overview_month_read
from costapp.models.economics import CLOCK_LABELS


def month_card_context(card: MonthCard) -> dict[str, Any]:
    """The card as strings for ``economics/_month_card.html``."""
    cur, f = card.currency, card.forecast
    complete = f is not None and f.remaining_days == 0
    budgets = []
    for s in card.budgets:
        b, bf = s.budget, s.forecast
        burn = bf.budget_burn_date if bf is not None else None
        budgets.append(
            {
                "scope": b.scope,
                "name": b.name,
                "currency": b.currency,
                "amount": fmt.money(b.monthly_amount, b.currency),
                "to_date": fmt.money(bf.to_date, b.currency) if bf else fmt.MISSING,
                "point": fmt.money(bf.point, b.currency) if bf else fmt.MISSING,
                "share": fmt.percent(bf.budget_share) if bf else fmt.MISSING,
                "over": bool(
                    bf and bf.budget_share is not None and bf.budget_share > 1
                ),
                "runs_out": burn.strftime("%Y-%m-%d")
                if burn is not None
                else ("not this month" if bf else fmt.MISSING),
            }
        )
    return {
        "title": "Fleet" if card.scope == "fleet" else card.name or "Selection",
        # A deployment's spend is direct; a team's and the fleet's carry
        # pool idle and the unallocated bill.
        "basis": "direct" if card.scope == "deployment" else "fully loaded",
        "month": card.month.strftime("%B %Y"),
        "currency": cur,
        "as_of": card.as_of.isoformat() if card.as_of else fmt.MISSING,
        "to_date": fmt.money(card.to_date, cur),
        "to_date_raw": "" if card.to_date is None else str(card.to_date),
        "clocks": ", ".join(
            f"{CLOCK_LABELS.get(c, c)} {n} day{'s' if n != 1 else ''}"
            for c, n in sorted(
                card.clocks.items(), key=lambda item: list(CLOCK_LABELS).index(item[0])
            )
        ),
        "missing_days": card.missing_days,
        "point": fmt.money(f.point, cur) if f else fmt.MISSING,
        "point_raw": repr(f.point) if f else "",
        "interval": (
            f"{fmt.money(f.lower, cur)} \N{EN DASH} {fmt.money(f.upper, cur)}"
            if f
            else fmt.MISSING
        ),
        "interval_pct": f"{f.interval:.0%}" if f else "",
        "method": fmt.forecast_method(f.method) if f else "",
        # A month with no day left has a total, not a forecast: an interval
        # of one value and a method "none" said nothing.
        "complete": complete,
        "forecast_label": "Month total" if complete else "Month-end forecast",
        "note": card.note
        or ("the month is over: nothing left to forecast" if complete else ""),
        "budgets": budgets,
        "active_alerts": card.active_alerts,
    }


def overview_month_context(
    *, today: date, team: str | None = None, deployments: Iterable[str] | None = None
) -> dict[str, Any]:
    """The one call the overview makes: ``month_card`` for the include."""
    card = overview_month_read(today=today, team=team, deployments=deployments)
    return {"month_card": month_card_context(card)}
