"""The export's rules for one UTC day: the day's shares and traffic into its
rows (``ExportRow``), one per account, currency, target and pool.

``Export`` (costapp/costs/export/build.py) runs them for each day it cannot read
whole; ``costapp.costs.shares`` runs them for each day it stores, by
deployment, and stores the rows (``CostExportRow``) beside the shares they
came from, so a year's export by deployment reads its rows instead of
rebuilding them. What the rows depend on beyond the day's shares, usage and
lines is the fleet (each deployment's home account, pool and what prices it)
and the rate card (a provisional row's cost): a digest of both (``CostExportDay``) is
stamped on the day, and stored rows under another digest are never read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping
from datetime import date
from decimal import Decimal

from analytics.allocation import IDLE, UNALLOCATED
from costapp.costs.export.reads import ShareRow, UsageRow
from costapp.costs.export.rows import ESTIMATED, FINAL, PROVISIONAL, QUANTUM, ExportRow
from costapp.costs.rates import RateBook, rate_book
from costapp.costs.selectors import NOMINAL_LABEL
from costapp.models import Deployment, RateCard

NO_TEAM = "__no_team__"
# A billed day with the deployment's traffic but none of the bill: $0.
NO_SHARE = "no share"
RATE_CARD = "rate card"

_RATE_FIELDS = [
    f.name for f in RateCard._meta.concrete_fields if f.name not in ("id", "source")
]


class DayRows:
    """The fleet and rate card one export (or one store) builds its days with,
    read once."""

    def __init__(self, *, by_team: bool = False) -> None:
        self.by_team = by_team
        self.fleet = {
            d.name: d
            for d in Deployment.objects.select_related("pool").order_by("name")
        }
        self.book: RateBook = rate_book()
        # name -> (home account, pool name): read once, not per row.
        self.homes = {
            d.name: (d.account_id, d.pool.name if d.pool else "")
            for d in self.fleet.values()
        }
        self._teams: dict[str, str] = {}

    def digest(self) -> str:
        """What the day's rows depend on besides its shares, usage and lines:
        each deployment's home, pool and rate key, and every rate card row."""
        fleet = [
            (d.name, d.account_id, d.gpu_type, d.instance_type, d.region,
             None if d.pool is None
             else (d.pool.name, d.pool.gpu_type, d.pool.instance_type, d.pool.region))
            for d in self.fleet.values()
        ]  # fmt: skip
        cards = sorted(
            RateCard.objects.values_list(*_RATE_FIELDS), key=lambda row: repr(row)
        )
        return hashlib.sha256(repr((fleet, cards)).encode()).hexdigest()

    def target(self, name: str) -> str:
        """The row a deployment's money goes in: itself, or its team."""
        if not self.by_team or name in (IDLE, UNALLOCATED):
            return name
        team = self._teams.get(name)
        if team is None:
            dep = self.fleet.get(name)
            team = self._teams[name] = (dep.team if dep is not None else "") or NO_TEAM
        return team

    def day(
        self,
        day: date,
        shares: list[ShareRow],
        traffic: list[UsageRow],
        estimated: Mapping[str, Collection[date]],
    ) -> list[ExportRow]:
        """The rows of one day from its shares (sorted by account and
        currency, each in the order the allocation produced them) and its
        deployments' traffic; ``estimated`` names each account's days with
        an estimated line."""
        book, fleet, homes = self.book, self.fleet, self.homes
        rows: dict[tuple[str, str, str, str], ExportRow] = {}
        # Which row carries each deployment's traffic (exactly one per day).
        traffic_row: dict[str, ExportRow] = {}
        target_of = self.target if self.by_team else None
        # Each billed account's first currency (in sorted order).
        currencies: dict[str, str] = {}
        status = FINAL
        for _, account, currency, name, pool, how, amount in shares:
            if account not in currencies:
                currencies[account] = currency
                status = ESTIMATED if day in estimated.get(account, ()) else FINAL
            target = name if target_of is None else target_of(name)
            key = (account, currency, target, pool)
            row = rows.get(key)
            if row is None:
                row = rows[key] = ExportRow(
                    day, account, currency, target, pool, status
                )
            row.hows.add(how)
            row.bill = amount if row.bill is None else row.bill + amount
            if name != IDLE and name != UNALLOCATED:
                if name not in traffic_row:
                    traffic_row[name] = row
                else:
                    known = homes.get(name)
                    if known is not None and account == known[0]:
                        traffic_row[name] = row
        billed_accounts = sorted(currencies)
        for _, name, gpu_hours, requests, nominal, prompt, generation in traffic:
            dep = fleet.get(name)
            if dep is None:
                continue
            home, pool_name = homes[name]
            billed = home in billed_accounts if home else bool(billed_accounts)
            row = traffic_row.get(name)
            if billed and row is None:
                # The day is billed and none of it is this deployment's: $0.
                account = home or billed_accounts[0]
                currency = currencies[account]
                key = (account, currency, self.target(name), pool_name)
                row = rows.get(key)
                if row is None:
                    status = ESTIMATED if day in estimated.get(account, ()) else FINAL
                    row = rows[key] = ExportRow(day, *key, status)
                    row.add_bill(Decimal(0))
                    row.hows.add(NO_SHARE)
            elif not billed:
                rate = book.for_deployment(dep, day)
                currency = rate[1] if rate is not None else "USD"
                key = (home, currency, self.target(name), pool_name)
                row = rows.get(key)
                if row is None:
                    row = rows[key] = ExportRow(day, *key, PROVISIONAL)
                row.hows.add(RATE_CARD)
                if rate is not None and gpu_hours is not None:
                    row.add_provisional((gpu_hours * rate[0]).quantize(QUANTUM))
            assert row is not None
            if nominal:
                row.hows.add(NOMINAL_LABEL.format(n=nominal))
            row.add_traffic(gpu_hours, requests, nominal, prompt, generation)
        return list(rows.values())
