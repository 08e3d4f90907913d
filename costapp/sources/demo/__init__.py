"""The demo fleet: a deterministic generator that looks like a real one.

Nothing here reads the clock: the window's end is a parameter (the demo command
passes today's UTC midnight) and every random draw comes from a numpy Generator
seeded with ``(seed, deployment index)``, so the same seed and end give the same
rows, byte for byte.

What it shows, because real fleets show it:

* a daily cycle peaking around 20:00 UTC, quieter weekends, slow growth;
* a holiday whose traffic dips (unit cost rises; nothing is wrong);
* pods that come and go with an autoscaler and restart (counter resets): raw
  counter samples are simulated per pod every 60 s and turned into hourly
  figures by ``analytics.telemetry.hourly_counter_increases``, the same code
  the Prometheus adapter uses;
* gauges that agree with the counters and histograms: each pod's running
  batch is Little's law on the ITL its histogram carries (tokens/s x the hour's
  loaded mean ITL), so tokens/s = running / mean ITL, as in a real engine;
* a scrape gap of six hours: those hours have no rows, and the counters' jump
  lands in the first hour after the gap (docs/telemetry.md);
* an incident on ``chat``: a rollout reverts the KV-cache dtype from fp8 to
  auto for three days, batch capacity halves, the autoscaler adds replicas and
  GPU-hours (hence $ per 1k requests) rise about 40% at unchanged traffic;
* bills as Cost Explorer response pages (amortized and unblended, an RI fee on
  the 1st of each month, a monthly credit, one day of lag, the last two billed
  days estimated), parsed
  by ``costapp.sources.cost_explorer.records_from_response``.

The story (what the demo shows) is ``story``; the simulation ``telemetry``;
the bills ``bills``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime, timedelta

from costapp.days import day_start
from costapp.sources.base import Batch, Record, Window
from costapp.sources.demo import bills, telemetry
from costapp.sources.demo.story import (
    DAY,
    DEPLOYMENTS,
    ENGINE_FIGURES,
    HOUR,
    DemoEvents,
)

__all__ = ["ENGINE_FIGURES", "DemoEvents", "DemoSource"]


class DemoSource:
    """The demo fleet as a ``Source`` (see costapp.sources.base)."""

    name = "demo"

    def __init__(self, *, seed: int = 7, days: int = 90, end: datetime) -> None:
        if days < 1:
            raise ValueError(f"days must be at least 1, got {days}")
        self.seed = seed
        self.days = days
        self.end = day_start(end)
        self.start = self.end - timedelta(days=days)
        self.events = DemoEvents.for_end(self.end)

    @property
    def window(self) -> Window:
        return Window(self.start, self.end)

    # -- Source protocol -------------------------------------------------------

    def plan(self, window: Window) -> int:
        days = self._days_in(window)
        return len(days) + 3 * math.ceil(len(days) / bills.PAGE_DAYS)

    def fetch(self, window: Window) -> Iterator[Batch]:
        days = self._days_in(window)
        if not days:
            return
        simulated = [
            telemetry.simulate(
                i,
                spec,
                events=self.events,
                start=self.start,
                days=self.days,
                seed=self.seed,
            )
            for i, spec in enumerate(DEPLOYMENTS)
        ]
        devices = telemetry.devices(simulated)
        t_first = int(days[0].timestamp())
        t_last = int(days[-1].timestamp()) + DAY
        for day in days:
            t0 = int(day.timestamp())
            records: list[Record] = []
            for sim in simulated:
                for h in range(t0, t0 + DAY, HOUR):
                    if h in sim.hour_records:
                        records.append(sim.hour_records[h])
                        records.extend(sim.histograms[h])
            for h in range(t0, t0 + DAY, HOUR):
                records.extend(devices.get(h, []))
            yield Batch(records=records)
        # Cost Explorer lags: the newest day has telemetry but no bill yet, so
        # the overview shows it provisional until the next load.
        bill_last = min(t_last, int(self.end.timestamp()) - bills.BILL_LAG_DAYS * DAY)
        if bill_last > t_first:
            yield from bills.bill_batches(simulated, t_first, bill_last, end=self.end)
        if days[-1] + timedelta(days=1) == self.end:
            yield Batch(records=telemetry.discovery(self.end), steps=0)

    def _days_in(self, window: Window) -> list[datetime]:
        start = max(day_start(window.start), self.start)
        if window.start > start:
            start += timedelta(days=1)
        end = min(window.end, self.end)
        out = []
        day = start
        while day + timedelta(days=1) <= end:
            out.append(day)
            day += timedelta(days=1)
        return out
