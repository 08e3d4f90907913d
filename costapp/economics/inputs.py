"""What the unit-cost recompute reads: hours, the allocated bill and the rate
card per series, and which series a run changed (with their pool siblings)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
from django.conf import settings

from analytics.allocation import IDLE, UNALLOCATED
from analytics.calendar import holiday_calendar
from costapp.costs.rates import rate_book
from costapp.models import (
    CostLine,
    Deployment,
    DeploymentHour,
    IngestRun,
    TeamHoliday,
)
from costapp.models.functions import Epoch

# --- inputs of the recompute (issue 9) -------------------------------------------

CLOCK_ORDER = {"provisional": 0, "estimated": 1, "final": 2}


@dataclass(frozen=True)
class RecomputeInputs:
    """What ``unit_costs_recompute`` feeds to ``analytics``, as plain frames.

    ``hours``: one row per deployment and UTC hour with telemetry: deployment,
    team, pool, period_start, day, requests (stop + length), requests_length,
    prompt_tokens, generation_tokens, gpu_hours (NaN where the GPU-seconds are
    unknown), replicas, rate_card ($ per GPU-hour that day; NaN: none),
    currency (the rate card's), complete (read after it ended plus the settle
    delay).
    ``bills``: one row per deployment, UTC day and currency that received a
    share of the allocated bill: deployment, day, currency, bill_cost (float),
    bill_status (final / estimated).
    ``overheads``: pool idle and unallocated dollars: pool ("" for
    unallocated), kind (idle / unallocated), day, currency, amount, bill_status.
    ``deployments``: name, team, pool.
    ``holidays``: team, day, name: the teams' calendars from the fleet file
    (``analytics.calendar.holiday_calendar``) over the inputs' days.
    """

    hours: pd.DataFrame
    bills: pd.DataFrame
    overheads: pd.DataFrame
    deployments: pd.DataFrame
    holidays: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["team", "day", "name"])
    )


HOUR_COLUMNS = (
    "deployment", "team", "pool", "period_start", "day", "requests",
    "requests_length", "prompt_tokens", "generation_tokens", "gpu_hours",
    "replicas", "rate_card", "currency", "complete",
)  # fmt: skip


def recompute_inputs_read(*, basis: str = "amortized") -> RecomputeInputs:
    """Every stored hour, bill day and overhead, for the full history: the
    baselines carry state from the first day, so an incremental recompute
    reads the same inputs as the full one and only recomputes fewer series."""
    from costapp.costs.allocations import allocation_days, bill_days
    from costapp.costs.selectors import basis_or_default

    fleet = list(Deployment.objects.select_related("pool").order_by("name"))
    by_name = {d.name: d for d in fleet}
    deployments = pd.DataFrame(
        [
            {"name": d.name, "team": d.team, "pool": d.pool.name if d.pool else ""}
            for d in fleet
        ],
        columns=["name", "team", "pool"],
    )
    hours = _hours_read(by_name, rate_book())

    chosen = basis_or_default(basis)
    if len(hours):
        start = hours["day"].min().date()
        end = hours["day"].max().date() + timedelta(days=1)
    else:
        start = end = date(1970, 1, 1)
    # Bill days outside telemetry still count for the overheads and the fleet.
    first_bill = CostLine.objects.order_by("period_start").first()
    last_bill = CostLine.objects.order_by("-period_start").first()
    if first_bill is not None and last_bill is not None:
        start = min(start, first_bill.period_start.astimezone(UTC).date())
        end = max(end, last_bill.period_start.astimezone(UTC).date() + timedelta(1))
    estimated = {
        (b.day, b.account_id, b.currency): b.estimated
        for b in bill_days(start, end, chosen)
    }
    bill_acc: dict[tuple[str, date, str], list[Any]] = {}
    over_acc: dict[tuple[str, str, date, str], list[Any]] = {}
    for (account, day, currency), allocation in allocation_days(
        start, end, chosen
    ).items():
        est = estimated.get((day, account, currency), False)
        for share in allocation.shares:
            if share.target in (IDLE, UNALLOCATED):
                kind = "idle" if share.target == IDLE else "unallocated"
                key = (share.pool if kind == "idle" else "", kind, day, currency)
                slot = over_acc.setdefault(key, [Decimal(0), False])
            else:
                slot = bill_acc.setdefault(
                    (share.target, day, currency), [Decimal(0), False]
                )
            slot[0] += share.amount
            slot[1] |= est
    bills = pd.DataFrame.from_records(
        [
            (
                name,
                pd.Timestamp(day),
                cur,
                float(v[0]),
                "estimated" if v[1] else "final",
            )
            for (name, day, cur), v in sorted(bill_acc.items())
        ],
        columns=["deployment", "day", "currency", "bill_cost", "bill_status"],
    )
    overheads = pd.DataFrame.from_records(
        [
            (
                pool,
                kind,
                pd.Timestamp(day),
                cur,
                float(v[0]),
                "estimated" if v[1] else "final",
            )
            for (pool, kind, day, cur), v in sorted(over_acc.items())
        ],
        columns=["pool", "kind", "day", "currency", "amount", "bill_status"],
    )
    return RecomputeInputs(
        hours=hours,
        bills=bills,
        overheads=overheads,
        deployments=deployments,
        holidays=holidays_read(
            teams=sorted({t for t in deployments["team"] if t}), start=start, end=end
        ),
    )


def _hours_read(by_name: dict[str, Deployment], book: Any) -> pd.DataFrame:
    """Every stored telemetry hour as ``HOUR_COLUMNS``, built with numpy from
    one read (times as epoch seconds: parsing a timestamp per row was most
    of the read for a fleet of a thousand)."""
    rows = list(
        DeploymentHour.objects.annotate(
            epoch=Epoch("hour"), read_at=Epoch("run__started_at")
        )
        .order_by("deployment__name", "hour")
        .values_list(
            "deployment__name", "epoch", "requests_stop", "requests_length",
            "prompt_tokens", "generation_tokens", "gpu_seconds", "replicas_mean",
            "read_at",
        )
    )  # fmt: skip
    if not rows:
        return pd.DataFrame(columns=list(HOUR_COLUMNS))
    names, epoch, stop, length, prompt, gen, gpu_s, replicas, read_at = zip(
        *rows, strict=True
    )
    name = np.asarray(names, dtype=object)
    epoch_s = np.asarray(epoch, dtype=float)
    hour = pd.to_datetime(epoch_s, unit="s")
    day = hour.normalize()
    # Unknown GPU-seconds and replicas stay unknown (NaN), never 0.
    gpu = np.asarray([np.nan if g is None else g for g in gpu_s], dtype=float)
    reps = np.asarray([np.nan if r is None else r for r in replicas], dtype=float)
    # An hour read before its end plus the settle delay is not complete: its
    # last minutes may still arrive (a row with no run is from before runs
    # were kept, or written by hand: read long after).
    read = np.asarray([np.nan if r is None else r for r in read_at], dtype=float)
    closing = 3600.0 + settings.COSTAPP_SETTLE_S
    complete = np.isnan(read) | (read >= epoch_s + closing)
    # The rate card per deployment and day, once each.
    pairs = pd.DataFrame({"deployment": name, "day": day}).drop_duplicates()
    cards: list[tuple[float, str]] = []
    for n, d in zip(pairs["deployment"], pairs["day"], strict=True):
        found = book.for_deployment(by_name[n], d.date())
        cards.append((float(found[0]), found[1]) if found else (np.nan, "USD"))
    pairs["rate_card"] = [c for c, _ in cards]
    pairs["currency"] = [c for _, c in cards]
    team = {n: d.team for n, d in by_name.items()}
    pool = {n: d.pool.name if d.pool else "" for n, d in by_name.items()}
    stop_a = np.asarray(stop, dtype=float)
    length_a = np.asarray(length, dtype=float)
    hours = pd.DataFrame(
        {
            "deployment": name,
            "team": [team[n] for n in name],
            "pool": [pool[n] for n in name],
            "period_start": hour,
            "day": day,
            "requests": stop_a + length_a,
            "requests_length": length_a,
            "prompt_tokens": np.asarray(prompt, dtype=float),
            "generation_tokens": np.asarray(gen, dtype=float),
            "gpu_hours": gpu / 3600.0,
            "replicas": reps,
            "complete": complete,
        }
    )
    hours = hours.merge(pairs, on=["deployment", "day"], how="left")
    return hours[list(HOUR_COLUMNS)]


def holidays_read(*, teams: list[str], start: date, end: date) -> pd.DataFrame:
    """The stored calendars (``TeamHoliday``, from the fleet file) as days per
    team in ``[start, end)``; ``*`` entries apply to every team."""
    entries = list(TeamHoliday.objects.all())
    countries = [
        (team, e.country, e.subdiv)
        for e in entries
        if e.country
        for team in (teams if e.team == TeamHoliday.ALL_TEAMS else [e.team])
    ]
    days = [(e.team, e.day, e.name) for e in entries if e.day is not None]
    return holiday_calendar(
        pd.DataFrame(countries, columns=["team", "country", "subdiv"]),
        start=pd.Timestamp(start),
        end=pd.Timestamp(end) - pd.Timedelta(days=1),
        user_dates=pd.DataFrame(days, columns=["team", "day", "name"]),
        all_teams=teams,
    )


def series_siblings(names: Iterable[str]) -> set[str]:
    """The deployments whose figures move with ``names``: the names and every
    deployment sharing a pool with one of them (a restated or late hour
    changes how the pool's bill is split)."""
    wanted = set(names)
    pools = set(
        Deployment.objects.filter(name__in=wanted, pool__isnull=False).values_list(
            "pool_id", flat=True
        )
    )
    siblings = set(
        Deployment.objects.filter(pool_id__in=pools).values_list("name", flat=True)
    )
    return wanted | siblings


def run_changes(run: IngestRun) -> tuple[date, set[str] | None]:
    """(first changed day, deployments changed or None for all) of a run.

    Bills change every deployment of an account-day (allocation), so a bill
    run recomputes all series from its window start; a telemetry run only the
    deployments it wrote hours for, and their pool siblings.
    """
    since = run.window_start.astimezone(UTC).date()
    if run.source in ("cost_explorer", "focus", "demo"):
        return since, None
    names = set(
        DeploymentHour.objects.filter(run=run)
        .values_list("deployment__name", flat=True)
        .distinct()
    )
    return since, series_siblings(names)
