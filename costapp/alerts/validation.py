"""Rule and channel problems as (field, message) pairs, shared by the forms
and the fleet file's ``alerts:`` section (the fleet/validation.py pattern)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from costapp.models.alerts import METRICS, RULE_SCOPES

Problems = list[tuple[str, str]]
METRIC_NAMES = [m for m, _ in METRICS]
BASELINE_METRICS = {"cost_per_1k_requests"}  # the only metric with a stored band
RATIO_METRICS = {"cost_per_1k_requests", "cost_per_1m_tokens"}  # a stored baseline
DAY_ONLY = {"daily_spend", "budget_burn"}
EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def rule_problems(data: Mapping[str, Any]) -> Problems:
    problems: Problems = []
    metric = data.get("metric")
    condition = data.get("condition") or "ratio"
    if metric not in METRIC_NAMES:
        problems.append(("metric", f"{metric!r}: one of {', '.join(METRIC_NAMES)}"))
        return problems
    grain = data.get("grain")
    if grain not in ("hour", "day"):
        problems.append(("grain", f"{grain!r}: hour or day"))
    elif metric in DAY_ONLY and grain != "day":
        problems.append(("grain", f"{grain!r}: {metric} is daily"))
    scope = data.get("scope") or "deployment"
    if scope not in [s for s, _ in RULE_SCOPES]:
        problems.append(("scope", f"{scope!r}: deployment, team or fleet"))
    if condition not in ("band", "ratio", "threshold"):
        problems.append(("condition", f"{condition!r}: band, ratio or threshold"))
    elif condition == "band" and metric not in BASELINE_METRICS:
        problems.append(
            (
                "condition",
                f"{condition!r}: {metric} has no stored band; use a ratio or threshold",
            )
        )
    elif condition == "ratio" and metric not in RATIO_METRICS:
        problems.append(
            (
                "condition",
                f"{condition!r}: {metric} has no stored baseline; use a threshold",
            )
        )
    ratio = data.get("ratio")
    if condition == "ratio" and (
        not isinstance(ratio, int | float) or isinstance(ratio, bool) or ratio <= 1
    ):
        problems.append(("ratio", f"{ratio!r}: a number above 1 (1.2 = 20 % off)"))
    threshold = data.get("threshold")
    needs_threshold = condition == "threshold" or metric == "staleness"
    if needs_threshold and (
        not isinstance(threshold, int | float) or isinstance(threshold, bool)
    ):
        problems.append(("threshold", f"{threshold!r}: a number is required"))
    elif (
        needs_threshold
        and metric == "staleness"
        and isinstance(threshold, int | float)
        and threshold <= 0
    ):
        problems.append(("threshold", f"{threshold!r}: hours, above 0"))
    for name, low, high in (
        ("for_periods", 1, 1000),
        ("keep_firing_for", 1, 1000),
        ("repeat_minutes", 5, 7 * 24 * 60),
    ):
        value = data.get(name)
        if value is None and name != "for_periods":
            continue
        if value is None:
            value = 1
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append((name, f"{value!r}: a whole number"))
        elif not low <= value <= high:
            problems.append((name, f"{value!r}: between {low} and {high}"))
    min_requests = data.get("min_requests")
    if min_requests is not None and (
        not isinstance(min_requests, int | float) or min_requests < 0
    ):
        problems.append(("min_requests", f"{min_requests!r}: a number >= 0"))
    return problems


def channel_problems(kind: str, config: Mapping[str, Any]) -> Problems:
    problems: Problems = []
    if kind == "email":
        to = config.get("to")
        if not isinstance(to, list) or not to:
            problems.append(("to", f"{to!r}: one or more addresses"))
        else:
            for address in to:
                if not isinstance(address, str) or not EMAIL.match(address):
                    problems.append(("to", f"{address!r}: not an email address"))
    elif kind in ("webhook", "slack"):
        url = config.get("url")
        if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
            problems.append(("url", f"{_shown(url)}: an http(s) URL"))
        elif kind == "slack" and not url.startswith("https://"):
            problems.append(("url", "a Slack webhook URL starts with https://"))
    else:
        problems.append(("kind", f"{kind!r}: email, webhook or slack"))
    return problems


def _shown(url: object) -> str:
    # A Slack URL is a credential: never echo it whole into an error.
    text = repr(url)
    return text if len(text) < 40 else text[:30] + "…'"
