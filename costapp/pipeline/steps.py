"""What follows new data, named once and in order.

::

    telemetry ─┬─▶ rollups ──────────────────────────────────┐  (ingest queue)
               │                                             │
    bills ─────┴─▶ cost_shares ─▶ unit_costs ─┬─▶ alerts ────┤  (alerts queue)
                                              ├─▶ idle ──────┼─▶ pages
                                              └─▶ forecasts ─┘

Every way data arrives requests the entry steps of its kind
(``ENTRY_STEPS``): the Celery ingest task, the beat's telemetry and bills
refreshes, FOCUS uploads and ``focus_import``, ``telemetry_backfill``,
``bills_backfill`` and the demo load (``costapp.pipeline.runs``). A step that
succeeds requests the steps after it with the change it did. Each runs on a
queue (``queue``, mapped to a Celery queue by ``queue_name``): the live steps
on their own, so a backfill on the ingest queue never delays a page; the
rollups only feed the telemetry pages, which read the hours of any day not
rolled up yet, so they wait with the ingest.

A step's work (``costapp.pipeline.work``) is given the merged change and the
time, and returns what it did; it must be idempotent (a change may be done
twice after a crash).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property

from django.conf import settings
from django.utils.module_loading import import_string

from costapp.pipeline.change import Change


@dataclass(frozen=True)
class Outcome:
    rows: int = 0
    # Alert notifications to send (the task queues them after commit).
    deliveries: tuple[int, ...] = ()


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    queue: str  # "live", "ingest" or "alerts"
    # What it does, by dotted path (``costapp.pipeline.work``): this table is
    # read by the router, the pages and /metrics, which need none of it.
    does: str
    after: tuple[str, ...] = field(default=())
    # Steps it never runs beside: the evaluation judges figures only once the
    # recompute that wrote them has committed, so a figure's ``known_since``
    # is before every evaluation that can see it (late is not history).
    exclusive: tuple[str, ...] = field(default=())

    @cached_property
    def run(self) -> Callable[[Change, datetime], Outcome]:
        return import_string(self.does)  # type: ignore[no-any-return]


WORK = "costapp.pipeline.work"
STEPS: dict[str, Step] = {
    s.name: s
    for s in (
        Step(
            "rollups", "telemetry rollups (pages)", "ingest", f"{WORK}.rollups",
            after=("pages",),
        ),
        Step(
            "cost_shares", "cost shares (the allocated bill)", "live",
            f"{WORK}.cost_shares", after=("unit_costs",),
        ),
        Step(
            "unit_costs", "unit costs and baselines", "live", f"{WORK}.unit_costs",
            after=("alerts", "idle", "forecasts"), exclusive=("alerts",),
        ),
        Step("idle", "idle dollars", "live", f"{WORK}.idle", after=("pages",)),
        Step(
            "forecasts", "month forecasts", "live", f"{WORK}.forecasts",
            after=("pages",),
        ),
        Step(
            "alerts", "alert evaluation", "alerts", f"{WORK}.alerts",
            exclusive=("unit_costs",), after=("pages",),
        ),
        # Last: every step before it writes, and a write changes the key.
        Step("pages", "page bodies for the next readers", "live", f"{WORK}.pages"),
    )
}  # fmt: skip

# What each kind of data requests first.
ENTRY_STEPS: dict[str, tuple[str, ...]] = {
    "telemetry": ("rollups", "cost_shares"),
    "bills": ("cost_shares",),
    "both": ("rollups", "cost_shares"),
    # A fleet file or rate card edit: the allocation, then every figure.
    "fleet": ("cost_shares",),
}


def queue_name(step: str) -> str:
    """The Celery queue a step's task goes to (CELERY_TASK_ROUTES routes by
    this through ``costapp.pipeline.routing``)."""
    kind = STEPS[step].queue
    if kind == "ingest":
        return str(settings.COSTAPP_INGEST_QUEUE)
    if kind == "alerts":
        return "alerts"
    return str(settings.COSTAPP_LIVE_QUEUE)


def downstream(names: Iterable[str]) -> list[str]:
    """The steps ``names`` lead to, themselves included, in order."""
    out: list[str] = []
    todo = list(names)
    while todo:
        name = todo.pop(0)
        if name not in out:
            out.append(name)
            todo.extend(STEPS[name].after)
    order = list(STEPS)
    return sorted(out, key=order.index)
