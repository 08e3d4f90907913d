"""The beat schedule, declared in one place.

Every entry expires before its next run, so a backlog after an outage does not
replay a pile of stale refreshes; periods can be overridden from the environment
(``COSTAPP_SCHEDULE_<NAME>_S``).
"""

from __future__ import annotations

from dataclasses import dataclass

from costapp.env import env_int


@dataclass(frozen=True)
class Entry:
    name: str
    task: str
    period_s: int


ENTRIES = (
    # Cost Explorer lags a day or more and restates for days: a few pulls a day.
    Entry("bills-refresh", "costapp.costs.tasks.bills_refresh_task", 6 * 3600),
    # Telemetry is hourly; pull shortly after each hour closes.
    Entry(
        "telemetry-refresh", "costapp.telemetry.tasks.telemetry_refresh_task", 15 * 60
    ),
    # Runs whose worker died are marked failed once past the hard time limit.
    Entry("runs-reap", "costapp.tasks.runs_reap_task", 10 * 60),
    # The page cache's record of writes: one row per writing transaction,
    # folded hourly so the version query stays small (costapp/pagecache.py).
    Entry("changes-compact", "costapp.tasks.data_changes_compact_task", 3600),
    # Each ingest recomputes what it changed; a nightly full recompute catches
    # what no ingest announces (a fleet file edit, a rate card typed in).
    Entry(
        "unit-costs-recompute",
        "costapp.economics.tasks.unit_costs_recompute_all_task",
        24 * 3600,
    ),
    # Every rule once (also queued after each recompute); transitions are
    # claimed, so an evaluation overlapping the post-ingest one sends nothing twice.
    Entry("alerts-evaluate", "costapp.alerts.tasks.alert_rules_evaluate_task", 5 * 60),
    # Deliveries stuck in "sending" (a worker died mid-send) are re-sent with
    # the same webhook-id.
    Entry("deliveries-reap", "costapp.alerts.tasks.deliveries_reap_task", 5 * 60),
)


def beat_schedule() -> dict[str, dict[str, object]]:
    schedule: dict[str, dict[str, object]] = {}
    for entry in ENTRIES:
        env_name = "COSTAPP_SCHEDULE_" + entry.name.upper().replace("-", "_") + "_S"
        period = env_int(env_name, entry.period_s, minimum=60)
        schedule[entry.name] = {
            "task": entry.task,
            "schedule": float(period),
            "options": {"expires": max(30.0, period * 0.9)},
        }
    return schedule
