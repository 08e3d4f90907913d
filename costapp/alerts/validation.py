"""Rule and channel problems as (field, message) pairs, shared by the forms
and the fleet file's ``alerts:`` section (the fleet/validation.py pattern)."""

from __future__ import annotations

import math
import re
import socket
from collections.abc import Mapping
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from analytics.alert_rules import CONDITIONS
from analytics.errors import shown
from costapp.alerts.outbound import address_refusal
from costapp.models.alerts import (
    BUDGET_FORECAST_METRICS,
    METRICS,
    RULE_SCOPES,
    STALENESS_METRICS,
)

Problems = list[tuple[str, str]]
METRIC_NAMES = [m for m, _ in METRICS]
BASELINE_METRICS = {"cost_per_1k_requests"}  # the only metric with a stored band
RATIO_METRICS = {"cost_per_1k_requests", "cost_per_1m_tokens"}  # a stored baseline
DAY_ONLY = {"daily_spend", "budget_burn", *BUDGET_FORECAST_METRICS}
# Whole-number fields and their ranges.
INT_BOUNDS = {
    "for_periods": (1, 1000),
    "keep_firing_for": (1, 1000),
    "repeat_minutes": (5, 7 * 24 * 60),
}
# A ratio of 100 is 10,000 % off baseline: past that a rule never fires.
MAX_RATIO = 100.0
# Thresholds per metric's unit: money as the database holds it, % of budget,
# hours (a year). Every metric is a cost, a share or a duration: none is
# ever negative, so a negative threshold would fire (or never fire) always.
MAX_THRESHOLD = {
    "budget_burn": 10_000.0,
    "staleness": 24.0 * 366,
    "bill_staleness": 24.0 * 366,
}
# A month-end forecast as a share of the budget: 10 = ten budgets.
MAX_BUDGET_SHARE = 10.0
MAX_MONEY = 1e16
MAX_MIN_REQUESTS = 1e12


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
    elif metric == "bill_staleness" and scope != "fleet":
        problems.append(
            ("scope", f"{scope!r}: bill accounts are the fleet's; use fleet")
        )
    if condition not in CONDITIONS:
        problems.append(
            ("condition", f"{condition!r}: band, ratio, threshold, anomaly or price")
        )
    elif condition in ("band", "anomaly", "price") and metric not in BASELINE_METRICS:
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
    if condition == "ratio" and (not _is_number(ratio) or not 1 < ratio <= MAX_RATIO):
        problems.append(
            ("ratio", f"{ratio!r}: a number above 1, at most {MAX_RATIO:g} "
                      "(1.2 = 20 % off)")
        )  # fmt: skip
    threshold = data.get("threshold")
    needs_threshold = (
        condition == "threshold"
        or metric in STALENESS_METRICS
        or metric in BUDGET_FORECAST_METRICS
    )
    high = MAX_THRESHOLD.get(str(metric), MAX_MONEY)
    if needs_threshold and not _is_number(threshold):
        problems.append(("threshold", f"{threshold!r}: a number is required"))
    elif not needs_threshold or not _is_number(threshold):
        pass
    elif metric in STALENESS_METRICS and not 0 < threshold <= high:
        problems.append(
            ("threshold", f"{threshold!r}: hours, above 0, at most {high:g}")
        )
    elif metric in BUDGET_FORECAST_METRICS and not 0 < threshold <= MAX_BUDGET_SHARE:
        problems.append(
            (
                "threshold",
                f"{threshold!r}: a share of the budget above 0, at most "
                f"{MAX_BUDGET_SHARE:g} (1.0 = 100 %)",
            )
        )
    elif not 0 <= threshold <= high:
        problems.append(
            (
                "threshold",
                f"{threshold!r}: between 0 and {high:g} ({metric} is never negative)",
            )
        )
    for name, (low, high_int) in INT_BOUNDS.items():
        value = data.get(name)
        if value is None and name != "for_periods":
            continue
        if value is None:
            value = 1
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append((name, f"{value!r}: a whole number"))
        elif not low <= value <= high_int:
            problems.append((name, f"{value!r}: between {low} and {high_int}"))
    min_requests = data.get("min_requests")
    if min_requests is not None and (
        not _is_number(min_requests) or not 0 <= min_requests <= MAX_MIN_REQUESTS
    ):
        problems.append(
            (
                "min_requests",
                f"{min_requests!r}: a number from 0 to {MAX_MIN_REQUESTS:g}",
            )
        )
    return problems


# The Events API v2 integration key of a PagerDuty service.
ROUTING_KEY = re.compile(r"[A-Za-z0-9]{32}")


def channel_problems(kind: str, config: Mapping[str, Any]) -> Problems:
    problems: Problems = []
    if kind == "email":
        to = config.get("to")
        if not isinstance(to, list) or not to:
            problems.append(("to", f"{to!r}: one or more addresses"))
        else:
            for address in to:
                try:
                    validate_email(address)
                except ValidationError:
                    problems.append(("to", f"{shown(address)}: not an email address"))
    elif kind in ("webhook", "slack", "alertmanager", "pagerduty"):
        url = config.get("url")
        if reason := url_refusal(url, slack=kind == "slack"):
            problems.append(("url", f"{_masked_url(url)}: {reason}"))
        if kind == "pagerduty" and not ROUTING_KEY.fullmatch(
            str(config.get("routing_key") or "")
        ):
            key = str(config.get("routing_key") or "")
            shown_key = f"{key[:4]}…" if len(key) > 4 else repr(key)
            problems.append(
                (
                    "routing_key",
                    f"{shown_key}: a PagerDuty integration key, 32 letters and digits",
                )
            )
    else:
        problems.append(
            ("kind", f"{kind!r}: email, webhook, slack, alertmanager or pagerduty")
        )
    return problems


def url_refusal(url: object, *, slack: bool = False) -> str | None:
    """Why a receiver URL is refused when it is saved, or None. What can be
    told without DNS: the scheme, the port, credentials, and a host that is
    an address (in any spelling getaddrinfo reads: ``2130706433``,
    ``0177.0.0.1``, ``[::ffff:169.254.169.254]``) or ``localhost``. A name is
    resolved and checked again at every send (outbound.url_vet)."""
    if not isinstance(url, str) or not re.match(r"^https?://[^/\s]", url, re.I):
        return "an http(s) URL"
    if any(c.isspace() for c in url) or not url.isprintable():
        return "a URL has no spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port out of range)
    except ValueError as exc:
        return f"not a URL ({exc})"
    if slack and parts.scheme.lower() != "https":
        return "a Slack webhook URL starts with https://"
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL are not allowed"
    host = (parts.hostname or "").rstrip(".")
    if not host:
        return "no host"
    if host == "localhost" or host.endswith(".localhost"):
        return f"{host} is loopback"
    try:
        infos = socket.getaddrinfo(
            host, None, flags=socket.AI_NUMERICHOST, type=socket.SOCK_STREAM
        )
    except (socket.gaierror, UnicodeError):
        return None  # a name: checked when it is resolved, at send time
    for info in infos:
        if reason := address_refusal(str(info[4][0])):
            return reason
    return None


def _is_number(value: object) -> TypeGuard[float]:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _masked_url(url: object) -> str:
    """The URL quoted for an error, its tail hidden: a Slack URL is a
    credential, never echoed whole."""
    text = shown(url)
    return text if len(text) < 40 else text[:30] + "…'"
