"""What the demo's main pages say, read as a user reads it: no chart hovers a
raw float on a money axis ("$2.363806"), every trace there carries a
formatted hover template or its axis a hover format; and stored codes
(forecast methods, delivery statuses) are shown in words."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client

from costapp.models import IngestRun, UnitCostFigure
from tests.support.demo_data import demo_for_module
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db]

END = datetime(2026, 11, 30, tzinfo=UTC)
SCRIPT = re.compile(
    r'<script id="([^"]+)" type="application/json">(.*?)</script>', re.S
)
RAW_Y = re.compile(r"%\{y\}")


@pytest.fixture(scope="module")
def demo(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[IngestRun]:
    with demo_for_module(django_db_blocker, end=END, days=14) as run:
        yield run


def _figures(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return
    if isinstance(value, dict):
        if isinstance(value.get("data"), list) and isinstance(
            value.get("layout"), dict
        ):
            yield value
            return
        for inner in value.values():
            yield from _figures(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _figures(inner)


def _unformatted(page: str, html: str) -> list[str]:
    problems = []
    for script_id, body in SCRIPT.findall(html):
        for figure in _figures(json.loads(body)):
            layout = figure["layout"]
            for trace in figure["data"]:
                if trace.get("hoverinfo") in ("skip", "none"):
                    continue
                template = trace.get("hovertemplate")
                axis_name = "yaxis" + str(trace.get("yaxis", "y"))[1:]
                axis = layout.get(axis_name, {})
                if template is not None:
                    if RAW_Y.search(template) and axis.get("tickprefix"):
                        problems.append(
                            f"{page} #{script_id} {trace.get('name')!r}: {template}"
                        )
                    continue
                if axis.get("tickprefix") and not axis.get("hoverformat"):
                    problems.append(
                        f"{page} #{script_id} {trace.get('name')!r}: no hover format "
                        f"on money axis {axis_name}"
                    )
    return problems


def test_no_money_axis_hovers_a_raw_float(demo: IngestRun) -> None:
    client = Client()
    client.force_login(user_in("hover-lead", "tech lead"))
    flagged = UnitCostFigure.objects.filter(flag="anomaly").order_by("pk").first()
    pages = ["/", "/?preset=7d", "/fleet/chat/", "/fleet/moderation/",
             "/telemetry/chat/", "/economics/idle/", "/costs/breakdown/",
             "/economics/budgets/"]  # fmt: skip
    if flagged is not None:
        pages.append(f"/economics/explain/{flagged.pk}/")
    problems: list[str] = []
    drawn = 0
    with time_machine.travel(END + timedelta(hours=2), tick=False):
        for page in pages:
            response = client.get(page)
            assert response.status_code == 200, page
            html = response.content.decode()
            drawn += sum(
                1 for _, b in SCRIPT.findall(html) for _ in _figures(json.loads(b))
            )
            problems += _unformatted(page, html)
    assert drawn >= 8, drawn  # the walk found the pages' charts
    assert not problems, "\n".join(problems)


def test_forecast_methods_and_delivery_statuses_are_shown_in_words(
    demo: IngestRun,
) -> None:
    from costapp.alerts.secrets import config_encrypt
    from costapp.models import Channel, Delivery

    channel = Channel.objects.create(
        name="ops", kind="webhook",
        config_encrypted=config_encrypt({"url": "https://example.test/h"}),
    )  # fmt: skip
    Delivery.objects.create(
        channel=channel, webhook_id="w-1", status=Delivery.NOT_SENT,
        created_at=END, reason="silenced",
    )  # fmt: skip
    client = Client()
    client.force_login(user_in("words-lead", "tech lead"))
    with time_machine.travel(END + timedelta(hours=2), tick=False):
        budgets = client.get("/economics/budgets/").content.decode()
        log = client.get("/alerts/log/").content.decode()
    assert "ets-nonseasonal" not in budgets and "exponential smoothing" in budgets
    assert ">not sent<" in log and ">not_sent<" not in log
    assert "<td>not sent (silenced)</td>" in log
