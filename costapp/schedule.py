"""The beat schedule, declared in one place.

Every entry expires before its next run, so a backlog after an outage does not
replay a pile of stale refreshes; periods can be overridden from the environment
(``COSTAPP_SCHEDULE_<NAME>_S``).

An entry ``aligned`` to the clock runs at a fixed offset past each multiple of
its period (UTC), not at a period from whenever beat started: the telemetry
refresh runs ``ALIGN_AFTER_SETTLE_S`` past the settle delay after each quarter
of an hour, so the refresh after an hour's close reads it closed within a
minute, and the page comes a minute after the close instead of up to a period.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from costapp.env import env_int


@dataclass(frozen=True)
class Entry:
    name: str
    task: str
    period_s: int
    aligned: bool = False


# After the settle delay, the time Prometheus may still take to make the
# samples of a scrape queryable.
ALIGN_AFTER_SETTLE_S = 15


ENTRIES = (
    # Cost Explorer lags a day or more and restates for days: a few pulls a day.
    Entry("bills-refresh", "costapp.costs.tasks.bills_refresh_task", 6 * 3600),
    # Telemetry is hourly; pull shortly after each hour closes (aligned).
    Entry(
        "telemetry-refresh",
        "costapp.telemetry.tasks.telemetry_refresh_task",
        15 * 60,
        aligned=True,
    ),
    # Runs whose worker died are marked failed once past the hard time limit.
    Entry("runs-reap", "costapp.tasks.runs_reap_task", 10 * 60),
    # Pipeline steps with work that no lease holds and no recent task was sent
    # for (a worker killed mid-step, a broker restarted empty) are sent again:
    # figures trail the data by at most this plus the lease after a crash.
    Entry("pipeline-reap", "costapp.pipeline.tasks.pipeline_reap_task", 2 * 60),
    # The page cache's record of writes: one row per writing transaction,
    # folded hourly so the version query stays small (costapp/pagecache.py).
    Entry("changes-compact", "costapp.tasks.data_changes_compact_task", 3600),
    # Each ingest requests what follows it; a daily full recompute catches
    # what no ingest announces (a rate card typed into the admin).
    Entry(
        "unit-costs-recompute", "costapp.pipeline.tasks.pipeline_full_task", 24 * 3600
    ),
    # Every rule once (also after each recompute): staleness and the hours
    # that close need the clock, not new data. Through the pipeline's alerts
    # step, so two evaluations never overlap.
    Entry("alerts-evaluate", "costapp.pipeline.tasks.alerts_evaluate_task", 5 * 60),
    # The previous month's finance export, when COSTAPP_MONTHLY_EXPORT_TO is
    # set and the month is old enough (a no-op otherwise, and once written).
    Entry("month-export", "costapp.costs.tasks.month_export_task", 6 * 3600),
    # Deliveries stuck in "sending" (a worker died mid-send) are re-sent with
    # the same webhook-id.
    Entry("deliveries-reap", "costapp.alerts.tasks.deliveries_reap_task", 5 * 60),
)


def period_s(entry: Entry) -> int:
    env_name = "COSTAPP_SCHEDULE_" + entry.name.upper().replace("-", "_") + "_S"
    # Seconds are allowed down to 5 (a system test closes hours in minutes).
    return env_int(env_name, entry.period_s, minimum=5)


def entry(name: str) -> Entry:
    return next(e for e in ENTRIES if e.name == name)


def align_offset_s(entry: Entry) -> float:
    """Seconds past each multiple of the period an aligned entry runs at."""
    return float(settings.COSTAPP_SETTLE_S + ALIGN_AFTER_SETTLE_S) % period_s(entry)


def page_bound_s() -> float:
    """How long after a period closes its page may come, on this schedule.
    The aligned refresh reads a closed hour within a minute of its close;
    the bound is kept for a refresh that fails or overruns: the next one, a
    period later, and the evaluation up to one evaluation period after its
    recompute when steps wait on one another, and a period more for a
    refresh that runs long. Past this, a page says it is late."""
    return float(
        2 * period_s(entry("telemetry-refresh")) + period_s(entry("alerts-evaluate"))
    )


def beat_schedule() -> dict[str, dict[str, object]]:
    schedule: dict[str, dict[str, object]] = {}
    for entry in ENTRIES:
        period = period_s(entry)
        schedule[entry.name] = {
            "task": entry.task,
            "schedule": float(period),
            "options": {"expires": max(4.0, period * 0.9)},
        }
    return schedule
