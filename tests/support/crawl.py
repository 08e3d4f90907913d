"""Walking the URLconf: every named pattern, with its parameters filled from
seeded objects. Shared by the crawler and the fuzz test."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

from django.urls import URLPattern, URLResolver, get_resolver

from costapp.models import (
    AlertRule,
    Channel,
    Deployment,
    IngestRun,
    Scenario,
    UnitCostFigure,
)
from tests.capacity.seed_demo import seed_chat

# A channel, rule and team name as stored before the name rule refused them.
HOSTILE_NAME = "a\r\nBcc: evil@example.com \u202eevil\u2028"


def url_patterns(
    resolvers: list[URLPattern | URLResolver] | None = None,
    prefix: str = "",
    namespace: str = "",
) -> Iterator[tuple[str, str]]:
    """(URL name, route) for every named pattern, however deeply included."""
    for entry in resolvers if resolvers is not None else get_resolver().url_patterns:
        if isinstance(entry, URLResolver):
            ns = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            yield from url_patterns(entry.url_patterns, prefix + str(entry.pattern), ns)
        elif entry.name:
            yield f"{namespace}{entry.name}", prefix + str(entry.pattern)


def seed_url_objects() -> dict[str, str]:
    """Objects for the patterns' parameters (a 404 would hide a check)."""
    deployment = seed_chat(datetime.now(UTC))
    scenario = Scenario.objects.create(
        name="crawl", deployment=deployment, inputs={"query": ""}
    )
    run = IngestRun.objects.create(
        source="focus",
        window_start=datetime(2026, 11, 1, tzinfo=UTC),
        window_end=datetime(2026, 11, 2, tzinfo=UTC),
    )
    figure = UnitCostFigure.objects.create(
        scope="deployment",
        name=deployment.name,
        grain="day",
        period_start=datetime(2026, 11, 1, tzinfo=UTC),
        clock="final",
        flag="anomaly",
        cause="crawl",
        parts={"price": 0.1, "fleet": 0.2, "traffic": -0.05, "size": 0.0},
        cost_per_1k_requests=1.25,
        baseline=1.0,
        computed_at=datetime(2026, 11, 2, tzinfo=UTC),
    )
    rule = AlertRule.objects.create(
        name="crawl", metric="cost_per_1k_requests", grain="day", ratio=1.2
    )
    # A webhook the SSRF guard refuses: "send test" under the fuzz never
    # leaves the machine (and never needs DNS). Saving it needs its network
    # admitted (a private address is refused when saved); sending re-checks.
    from django.test import override_settings

    from costapp.alerts.services import channel_upsert

    with override_settings(COSTAPP_WEBHOOK_ALLOWED_NETWORKS=["10.0.0.0/8"]):
        channel = channel_upsert(
            name="crawl", kind="webhook", config={"url": "http://10.0.0.1/hook"}
        ).channel
    assert isinstance(channel, Channel)
    # Names stored before the name rule (issue 28): every page shows them,
    # one line and escaped, never a 500. The rows the URLs open keep plain
    # names, so the fuzzed forms are not refused on them alone.
    AlertRule.objects.create(
        name=HOSTILE_NAME, metric="daily_spend", grain="day", scope="team",
        scope_name=HOSTILE_NAME, condition="threshold", threshold=1.0,
    )  # fmt: skip
    channel_upsert(
        name=HOSTILE_NAME, kind="email", config={"to": ["oncall@example.com"]}
    )
    Deployment.objects.filter(pk=deployment.pk).update(team=HOSTILE_NAME)
    return {
        "rule_id": str(rule.pk),
        "channel_id": str(channel.pk),
        "figure_id": str(figure.pk),
        "deployment": deployment.name,
        "name": deployment.name,
        "scope": "deployment",
        "share_token": scenario.share_token,
        "run_id": str(run.pk),
        "topic": "costs",
        "file": "bills.png",
    }


def concrete(route: str, values: dict[str, str]) -> str:
    def fill(match: re.Match[str]) -> str:
        return values[match.group(1)]

    path = re.sub(r"<(?:\w+:)?(\w+)>", fill, route)
    return "/" + path.lstrip("^").rstrip("$")
