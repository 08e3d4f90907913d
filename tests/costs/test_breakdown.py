"""The cost breakdown page and the drill-down to a day's bill lines."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.db.models import Sum
from django.test import Client

from costapp.costs.breakdown import breakdown_read
from costapp.costs.forms import RangeForm, preset_window
from costapp.formatting import money
from costapp.models import CostLine
from tests.costs.conftest import utc
from tests.costs.test_exports import NOV, seed_month
from tests.support.users import user_in

pytestmark = pytest.mark.django_db
D = Decimal


def test_every_slice_of_each_dimension_sums_to_the_bill() -> None:
    seed_month(days=5, billed_days=4)
    b = breakdown_read(start=NOV, end=NOV + timedelta(days=5), basis="amortized")
    total = CostLine.objects.aggregate(t=Sum("amortized_cost"))["t"]
    assert b.totals == {"USD": total}
    for name, slices in b.dimensions.items():
        assert sum(s.amount for s in slices) == total, name
    by_service = {s.name: s.amount for s in b.dimensions["service"]}
    assert by_service == {"EC2": total}
    tags = {s.name: s.amount for s in b.dimensions["tag"]}
    assert tags["team=embed"] == 4 * D("19.3152000003")
    deployments = {s.name for s in b.dimensions["deployment"]}
    assert {"__idle__", "__unallocated__", "chat", "code", "embed"} <= deployments
    assert [s.name for s in b.idle] == ["p5-pool/__idle__"]
    unallocated = 4 * (D("5.5000000007") - D("12.50"))
    assert b.unallocated[0].amount == unallocated
    assert b.estimated_days == [date(2026, 11, 3), date(2026, 11, 4)]
    assert b.provisional_days == [date(2026, 11, 5)]
    last = b.days[0]
    assert last.day == date(2026, 11, 5) and last.status == "provisional"
    assert last.bill is None and last.difference is None
    # 5 + 2 GPU-hours x 24 at $6.88 and 1 x 24 at $0.8048, by the rate card
    assert last.provisional == D(7 * 24) * D("6.88") + D(24) * D("0.8048")
    first = b.days[-1]
    assert first.difference == first.allocated - first.provisional  # type: ignore[operator]


@time_machine.travel(utc(2026, 12, 10, 12), tick=False)
def test_presets_are_utc_day_windows_and_custom_needs_both_ends() -> None:
    today = date(2026, 12, 10)
    # Presets end at the last complete UTC day: today is not over.
    assert preset_window("7d", today) == (date(2026, 12, 3), date(2026, 12, 10))
    assert preset_window("mtd", today) == (date(2026, 12, 1), date(2026, 12, 10))
    assert preset_window("last_month", today) == (NOV, date(2026, 12, 1))
    form = RangeForm({"preset": "custom", "start": "2026-11-03"})
    assert not form.is_valid()
    assert form.messages() == ["end='': a custom range needs a start and an end"]
    assert RangeForm({"start": "2026-11-03", "end": "2026-11-05"}).is_valid()


@time_machine.travel(utc(2026, 12, 3, 12), tick=False)
def test_the_page_shows_its_window_and_links_a_day_to_its_lines(
    client: Client,
) -> None:
    seed_month(days=30, billed_days=29)
    client.force_login(user_in("fin", "finance"))
    page = client.get("/costs/breakdown/", {"preset": "last_month"}).content.decode()
    assert (
        "Showing UTC days <strong>2026-11-01</strong> to <strong>2026-11-30</strong>"
        in page
    )
    total = CostLine.objects.aggregate(t=Sum("amortized_cost"))["t"]
    assert money(total, "USD") in page
    assert "/costs/lines/?day=2026-11-29&amp;basis=amortized" in page
    assert "/costs/lines/?day=2026-11-30" not in page  # no bill: nothing to drill into
    assert "/costs/export.zip?start=2026-11-01&amp;end=2026-12-01" in page
    lines = client.get("/costs/lines/", {"day": "2026-11-02"}).content.decode()
    assert "4 lines, amortized (default), largest first" in lines
    assert "$1,321.9600" in lines and "-$12.5000" in lines
    bad = client.get("/costs/breakdown/", {"preset": "5y"}).content.decode()
    assert "preset=&#x27;5y&#x27;" in bad
    assert (
        "showing the default window 2026-11-03 to 2026-12-03 (exclusive; last 30 days"
        in bad
    )
    assert client.get("/costs/lines/", {"day": "2026-02-30"}).status_code == 200
