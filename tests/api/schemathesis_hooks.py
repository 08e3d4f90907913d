"""schemathesis hooks (SCHEMATHESIS_HOOKS, tests/api/test_schemathesis.py):
the API's rules that OpenAPI cannot state, each under the name it has in
docs/api.md ("Rules the schema cannot state").

A generated case the schema calls valid that breaks one of them is dropped
before it is sent: the API refuses it with a 400 naming the rule, and
positive_data_acceptance would report a valid request refused. Cases meant to
be invalid are all kept (the API refuses them either way). The filter is
``filter_case``, the one filter schemathesis applies in both the coverage and
the fuzzing phase (``filter_query`` is not applied by the coverage phase).

This module imports nothing of costapp: the schemathesis process has no
Django. The caps are copied from costapp/api/query.py and
costapp/economics/forms.py, and tests/api/test_schemathesis_rules.py holds
them (and the rule names) to the API's and the docs'.

Environment, set by the test: ``COSTAPP_ST_TODAY`` the server's UTC day
(ISO; the default windows end there), ``COSTAPP_ST_TEAMS`` and
``COSTAPP_ST_DEPLOYMENTS`` the fleet's names (comma-separated), and
``COSTAPP_ST_DROPPED`` a file that gets one line per dropped case
(``phase rule path``), so the test can see the filter act in both phases.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any, NamedTuple

import schemathesis

API = "/api/v1/"
# Longest window in days per endpoint (and grain), as query.py bounds it.
FIGURE_MAX_DAYS = {"hour": 31, "day": 366, "week": 3 * 366, "month": 10 * 366}
MAX_DAYS: dict[str, int | Mapping[str, int]] = {
    "unit-costs/": FIGURE_MAX_DAYS,
    "baselines/": FIGURE_MAX_DAYS,
    "spend/": 93,
    "idle/": 366,
    "moved/": 366,
    "alerts/events/": 366,
    "overview/": 3 * 366,
}
# The default window: it ends tomorrow and spans 30 days, except on the
# overview, which takes the page's (ends today, 90 days).
DEFAULT_DAYS = {"overview/": 90}
ENDS_TODAY = {"overview/"}


# Not a dataclass: schemathesis loads this file as a module outside
# sys.modules, where @dataclass cannot resolve it.
class Query(NamedTuple):
    endpoint: str  # the path after /api/v1/
    params: Mapping[str, Any]
    today: date

    def day(self, name: str) -> date | None:
        value = self.params.get(name)
        return None if value is None else date.fromisoformat(str(value))

    def window(self) -> tuple[date, date]:
        """[start, end) as the API fills in what was left out."""
        default_end = self.today + timedelta(
            days=0 if self.endpoint in ENDS_TODAY else 1
        )
        end = self.day("end") or default_end
        start = self.day("start") or end - timedelta(
            days=DEFAULT_DAYS.get(self.endpoint, 30)
        )
        return start, end

    def has_window(self) -> bool:
        return self.endpoint in MAX_DAYS and not self.preset()

    def preset(self) -> bool:
        return self.params.get("preset", "custom") != "custom"


def end_after_start(q: Query) -> bool:
    if not q.has_window():
        return True
    start, end = q.window()
    return start < end


def window_cap(q: Query) -> bool:
    if not q.has_window():
        return True
    start, end = q.window()
    cap = MAX_DAYS[q.endpoint]
    if not isinstance(cap, int):
        cap = cap[str(q.params.get("grain", "day"))]
    return (end - start).days <= cap


def preset_without_days(q: Query) -> bool:
    return not (q.preset() and ("start" in q.params or "end" in q.params))


def name_needs_scope(q: Query) -> bool:
    return q.endpoint != "moved/" or "name" not in q.params or "scope" in q.params


def names_of_the_fleet(q: Query) -> bool:
    if q.endpoint != "overview/":
        return True
    return all(
        str(q.params[field]) in fleet(field)
        for field in ("team", "deployment")
        if field in q.params
    )


def fleet(field: str) -> set[str]:
    names = os.environ.get(f"COSTAPP_ST_{field.upper()}S", "")
    return {n for n in names.split(",") if n}


# Each rule: whether a query keeps it. The names are docs/api.md's.
RULES: dict[str, Callable[[Query], bool]] = {
    "end-after-start": end_after_start,
    "window-cap": window_cap,
    "preset-without-days": preset_without_days,
    "name-needs-scope": name_needs_scope,
    "names-of-the-fleet": names_of_the_fleet,
}


def broken(endpoint: str, params: Mapping[str, Any], today: date) -> list[str]:
    """The names of the rules ``params`` breaks on ``endpoint``."""
    query = Query(endpoint, params, today)
    return [name for name, keeps in RULES.items() if not keeps(query)]


def server_today() -> date:
    given = os.environ.get("COSTAPP_ST_TODAY")
    return date.fromisoformat(given) if given else datetime.now(UTC).date()


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return True
    path = str(case.path)
    endpoint = path.split(API, 1)[1] if API in path else path
    rules = broken(endpoint, case.query or {}, server_today())
    log = os.environ.get("COSTAPP_ST_DROPPED")
    if rules and log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{meta.phase.name} {rules[0]} {path}\n")
    return not rules
