"""What the unit-cost recompute reads: hours, the allocated bill and the rate
card per series, the teams' holidays, and which deployments move with the
ones a run changed (their pool siblings)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
from django.conf import settings
from django.db.models import Q

from analytics.allocation import IDLE, UNALLOCATED
from analytics.calendar import holiday_calendar
from analytics.forecast import LUMP_TYPES
from analytics.unit_cost_frames import RecomputeInputs
from costapp.costs.allocations import allocation_days_read, bill_days_read
from costapp.costs.rates import rate_book
from costapp.costs.selectors import Basis, basis_or_default
from costapp.days import utc_midnight
from costapp.models import CostLine, Deployment, DeploymentHour, TeamHoliday
from costapp.models.functions import Epoch

HOUR_COLUMNS = (
    "deployment", "team", "pool", "period_start", "day", "requests",
    "requests_length", "prompt_tokens", "generation_tokens", "gpu_hours",
    "replicas", "rate_card", "currency", "complete",
)  # fmt: skip
BILL_COLUMNS = [
    "deployment", "day", "currency", "bill_cost", "bill_status", "recurring", "lump",
    "lump_amount",
]  # fmt: skip
OVERHEAD_COLUMNS = ["pool", "kind", "day", "currency", "amount", "bill_status"]


def recompute_inputs_read(*, basis: str = "amortized") -> RecomputeInputs:
    """Every stored hour, bill day and overhead, for the full history: the
    baselines carry state from the first day, so an incremental recompute
    reads the same inputs as the full one and only recomputes fewer series."""
    fleet = list(Deployment.objects.select_related("pool").order_by("name"))
    deployments = pd.DataFrame(
        [
            {"name": d.name, "team": d.team, "pool": d.pool.name if d.pool else ""}
            for d in fleet
        ],
        columns=["name", "team", "pool"],
    )
    hours = _hours_read({d.name: d for d in fleet}, rate_book())
    chosen = basis_or_default(basis)
    start, end = _days_read(hours)
    bills, overheads = _allocated_read(start, end, chosen)
    return RecomputeInputs(
        hours=hours,
        bills=bills,
        overheads=overheads,
        deployments=deployments,
        holidays=holidays_read(
            teams=sorted({t for t in deployments["team"] if t}), start=start, end=end
        ),
    )


def _days_read(hours: pd.DataFrame) -> tuple[date, date]:
    """[start, end) of the days with telemetry or a bill line: bill days
    outside telemetry still count for the overheads and the fleet."""
    if len(hours):
        start = hours["day"].min().date()
        end = hours["day"].max().date() + timedelta(days=1)
    else:
        start = end = date(1970, 1, 1)
    first_bill = CostLine.objects.order_by("period_start").first()
    last_bill = CostLine.objects.order_by("-period_start").first()
    if first_bill is not None and last_bill is not None:
        start = min(start, first_bill.period_start.astimezone(UTC).date())
        end = max(end, last_bill.period_start.astimezone(UTC).date() + timedelta(1))
    return start, end


def _allocated_read(
    start: date, end: date, basis: Basis
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The allocated bill of [start, end) as ``RecomputeInputs.bills`` (per
    deployment, with its recurring discount lines and one-off amounts for
    ``analytics.known_prices``) and ``overheads`` (pool idle, unallocated),
    each day's status estimated where any of its bill was."""
    estimated = {
        (b.day, b.account_id, b.currency): b.estimated
        for b in bill_days_read(start, end, basis)
    }
    labels = _price_lines_read(start, end)
    bill_acc: dict[tuple[str, date, str], _BillDay] = {}
    over_acc: dict[tuple[str, str, date, str], list[Any]] = {}
    for (account, day, currency), allocation in allocation_days_read(
        start, end, basis
    ).items():
        est = estimated.get((day, account, currency), False)
        for share in allocation.shares:
            if share.target in (IDLE, UNALLOCATED):
                kind = "idle" if share.target == IDLE else "unallocated"
                key = (share.pool if kind == "idle" else "", kind, day, currency)
                slot = over_acc.setdefault(key, [Decimal(0), False])
                slot[0] += share.amount
                slot[1] |= est
                continue
            acc = bill_acc.setdefault((share.target, day, currency), _BillDay())
            acc.add(share.amount, est, labels.get(share.line_key))
    bills = pd.DataFrame.from_records(
        [
            (name, pd.Timestamp(day), cur, *acc.row(cur))
            for (name, day, cur), acc in sorted(bill_acc.items())
        ],
        columns=BILL_COLUMNS,
    )
    overheads = pd.DataFrame.from_records(
        [
            (pool, kind, pd.Timestamp(day), cur, float(v[0]), _status(v[1]))
            for (pool, kind, day, cur), v in sorted(over_acc.items())
        ],
        columns=OVERHEAD_COLUMNS,
    )
    return bills, overheads


# One-off amounts are the forecast's lumps (analytics.forecast.LUMP_TYPES);
# discounts recur daily while a commitment runs.
RECURRING_RECORD_TYPES = ("discount",)


def _price_lines_read(start: date, end: date) -> dict[str, tuple[str, str]]:
    """Line key -> (recurring or lump, its name) for the bill lines of
    [start, end) that can move a price: one-off amounts, discounts and usage
    a commitment covers (few, against every usage line)."""
    lines = (
        CostLine.objects.filter(
            period_start__gte=utc_midnight(start), period_start__lt=utc_midnight(end)
        )
        .filter(
            Q(record_type__in=(*LUMP_TYPES, *RECURRING_RECORD_TYPES))
            | ~Q(commitment="")
        )
        .values_list("pk", "record_type", "commitment", "usage_type")
    )
    return {
        str(pk): (
            "lump" if kind in LUMP_TYPES else "recurring",
            _line_name(kind, commitment, usage_type),
        )
        for pk, kind, commitment, usage_type in lines
    }


def _line_name(kind: str, commitment: str, usage_type: str) -> str:
    """The commitment a line belongs to (``CostLine.commitment``) where it
    has one, then its record type and usage type: "reserved instance usage
    (BoxUsage:g6e.xlarge)", "credit (USE1-PromotionalCredit)"."""
    what = {"savings_plan": "savings plan", "reserved": "reserved instance"}.get(
        commitment, ""
    )
    what = f"{what} {kind}" if what else kind
    return f"{what} ({usage_type})" if usage_type else what


class _BillDay:
    """One deployment's allocated bill of a day, summed over its shares."""

    def __init__(self) -> None:
        self.amount = Decimal(0)
        self.estimated = False
        self.recurring: set[str] = set()
        self.lumps: dict[str, Decimal] = {}

    def add(
        self, amount: Decimal, estimated: bool, line: tuple[str, str] | None
    ) -> None:
        self.amount += amount
        self.estimated |= estimated
        if line is None or not amount:
            return
        kind, name = line
        if kind == "recurring":
            self.recurring.add(name)
        else:
            self.lumps[name] = self.lumps.get(name, Decimal(0)) + amount

    def row(self, currency: str) -> tuple[Any, ...]:
        lump = "; ".join(
            f"{name} {amount:+,.2f} {currency}"
            for name, amount in sorted(self.lumps.items())
        )
        total = float(sum(self.lumps.values(), Decimal(0))) if self.lumps else np.nan
        return (
            float(self.amount), _status(self.estimated),
            "; ".join(sorted(self.recurring)), lump, total,
        )  # fmt: skip


def _status(estimated: bool) -> str:
    return "estimated" if estimated else "final"


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
