"""What each endpoint sends. Money goes out as a fixed-point decimal string
(never a float, never an exponent) beside its currency; a figure that could
not be measured is null, never 0."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

# The money columns' scale (DECIMAL(28, 12)): a product of two of them is cut
# back to it, as the bills area stores.
PLACES = 12
QUANTUM = Decimal(1).scaleb(-PLACES)


def decimal_text(value: Any) -> str | None:
    """Fixed-point text: a Decimal at most at the columns' scale (a product
    of two of them is cut back to it), a float as its shortest round-trip
    digits (the stored figure, exactly)."""
    if value is None:
        return None
    if isinstance(value, float):
        return format(Decimal(repr(value)), "f") if math.isfinite(value) else None
    if not isinstance(value, Decimal):
        value = Decimal(str(value))
    if not value.is_finite():
        return None
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -PLACES:
        value = value.quantize(QUANTUM)
    return format(value, "f")


@extend_schema_field(
    {
        "type": "string",
        "format": "decimal",
        "pattern": r"^-?[0-9]+(\.[0-9]+)?$",
        "example": "1234.560000000000",
    }
)
class Money(serializers.Field):
    """A Decimal or float amount as a decimal string, or null. ``places``:
    an estimate's (a forecast's) fixed places, e.g. 2 for cents; a float's
    17 digits would claim a precision no forecast has."""

    def __init__(self, *, places: int | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)
        self.places = places

    def to_representation(self, value: Any) -> str | None:
        text = decimal_text(value)
        if text is None or self.places is None:
            return text
        return format(Decimal(text).quantize(Decimal(1).scaleb(-self.places)), "f")


class Number(serializers.FloatField):
    """A measured quantity; NaN and infinities go out as null (JSON has
    neither)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("read_only", True)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_representation(self, value: Any) -> float | None:  # type: ignore[override]
        if value is None:
            return None
        number = float(value)
        return number if math.isfinite(number) else None


def ro(field: type[serializers.Field], **kwargs: Any) -> Any:
    return field(read_only=True, **kwargs)


class UnitCost(serializers.Serializer):
    scope = ro(serializers.CharField)
    name = ro(serializers.CharField)
    grain = ro(serializers.CharField)
    period_start = ro(serializers.DateTimeField)
    currency = ro(serializers.CharField)
    clock = ro(serializers.CharField, help_text="provisional, estimated or final")
    rate_source = ro(serializers.CharField)
    cost = Money()
    list_cost = Money(help_text="GPU-hours x the rate card")
    idle_cost = Money()
    unallocated_cost = Money()
    cost_per_1k_requests = Money()
    cost_per_1m_tokens = Money()
    cost_per_gpu_hour = Money()
    gpu_hours = Number()
    requests = Number(help_text="finished requests (stop + length)")
    prompt_tokens = Number()
    generation_tokens = Number()
    note = ro(serializers.CharField, help_text="why a figure is missing")


class Baseline(serializers.Serializer):
    scope = ro(serializers.CharField)
    name = ro(serializers.CharField)
    grain = ro(serializers.CharField)
    period_start = ro(serializers.DateTimeField)
    currency = ro(serializers.CharField)
    clock = ro(serializers.CharField)
    cost_per_1k_requests = Money()
    baseline = Money(help_text="EWMA baseline of the cost per 1k requests")
    lower = Money()
    upper = Money()
    cost_per_1m_tokens = Money()
    baseline_per_1m_tokens = Money()
    flag = ro(serializers.CharField, help_text='"" in band; anomaly, traffic, size')
    cause = ro(serializers.CharField)
    level_shift = ro(serializers.BooleanField)
    warm = ro(serializers.BooleanField)


class SpendDay(serializers.Serializer):
    day = ro(serializers.DateField)
    deployment = ro(serializers.CharField, help_text="or __idle__, __unallocated__")
    pool = ro(serializers.CharField)
    kind = ro(serializers.CharField, help_text="deployment, idle or unallocated")
    currency = ro(serializers.CharField)
    status = ro(serializers.CharField, help_text="final, estimated or provisional")
    bill = Money(help_text="allocated bill; null until the day is billed")
    provisional = Money(help_text="GPU-hours x the rate card; never in the bill")
    gpu_hours = Number()


class PoolIdleDay(serializers.Serializer):
    pool = ro(serializers.CharField, source="name")
    period_start = ro(serializers.DateTimeField, help_text="the UTC day")
    currency = ro(serializers.CharField)
    clock = ro(serializers.CharField)
    idle_cost = Money()
    cost = Money()
    gpu_hours = Number()


class Rightsizing(serializers.Serializer):
    deployment = ro(serializers.CharField)
    team = ro(serializers.CharField)
    peak_hour = ro(
        serializers.DateTimeField,
        allow_null=True,
        help_text="the busiest complete UTC hour of the last 7 days",
    )
    requests_per_s = Number(help_text="finished requests/s in the peak hour")
    replicas_running = Number(help_text="mean replicas up during the peak hour")
    capacity_per_replica = Number(
        help_text="requests/s one replica carries within the SLA"
    )
    method = ro(serializers.CharField, help_text="roofline or calibrated")
    target_utilisation = Number()
    needed_at_sla = ro(serializers.IntegerField, allow_null=True)
    recommended = ro(
        serializers.IntegerField,
        allow_null=True,
        help_text="replicas at the target utilisation",
    )
    change = Number(help_text="recommended - replicas_running; negative: fewer")
    gpus_per_replica = Number()
    gpus_running = Number()
    gpus_recommended = Number()
    currency = ro(serializers.CharField)
    headroom_cost = Money(help_text="the idle page's headroom, last 30 complete days")
    headroom_gpu_hours = Number()
    headroom_days_known = ro(serializers.IntegerField)
    problem = ro(serializers.CharField, help_text="why a figure is null")


class BudgetStatus(serializers.Serializer):
    scope = ro(serializers.CharField)
    name = ro(serializers.CharField)
    currency = ro(serializers.CharField)
    monthly_amount = Money()
    month = ro(serializers.DateField, allow_null=True)
    as_of = ro(serializers.DateField, allow_null=True)
    spent_to_date = Money()
    spent_share = Number(help_text="spent to date / monthly amount")
    forecast = Money(places=2, help_text="month-end spend, mean of the simulation")
    forecast_lower = Money(places=2)
    forecast_upper = Money(places=2)
    runs_out_on = ro(serializers.DateField, allow_null=True)


class AlertEvent(serializers.Serializer):
    id = ro(serializers.IntegerField)
    rule = ro(serializers.CharField, source="rule.name")
    metric = ro(serializers.CharField, source="rule.metric")
    scope_name = ro(serializers.CharField)
    kind = ro(serializers.CharField)
    data_time = ro(serializers.DateTimeField)
    value = Money(help_text="in the metric's unit (currency for money metrics)")
    baseline = Money()
    currency = ro(serializers.CharField, allow_null=True)
    reason = ro(serializers.CharField)
    explanation = ro(serializers.CharField)
    not_sent = ro(serializers.CharField)
    created_at = ro(serializers.DateTimeField)


class ActiveAlert(serializers.Serializer):
    rule = ro(serializers.CharField, source="rule.name")
    metric = ro(serializers.CharField, source="rule.metric")
    scope_name = ro(serializers.CharField)
    state = ro(serializers.CharField, help_text="pending or firing")
    since = ro(serializers.DateTimeField, allow_null=True)
    data_time = ro(serializers.DateTimeField, allow_null=True)


class Moved(serializers.Serializer):
    scope = ro(serializers.CharField)
    name = ro(serializers.CharField)
    currency = ro(serializers.CharField)
    start = ro(serializers.DateField, help_text="first UTC day compared")
    end = ro(serializers.DateField, help_text="exclusive; no later than today")
    before_start = ro(serializers.DateField)
    before_end = ro(serializers.DateField, help_text="exclusive: the start")
    spend = Money(help_text="the series' basis: direct (deployment), fully loaded")
    spend_b = Money(help_text="the period before")
    spend_change = Money()
    spend_price = Money()
    spend_fleet = Money()
    spend_clock = Money()
    cost_per_1k_requests = Money(source="u")
    cost_per_1k_requests_b = Money(source="u_b")
    change = Money(help_text="in $ per 1k requests; the parts sum to it")
    price = Money()
    fleet = Money()
    traffic = Money()
    size = Money()
    clock = Money(help_text="0 where both periods rest on the same clocks")
    clocks = ro(serializers.CharField, help_text="clocks of the period's days")
    clocks_b = ro(serializers.CharField)
    days = ro(serializers.IntegerField, help_text="days with cost and requests")
    days_b = ro(serializers.IntegerField)
    days_missing = ro(serializers.IntegerField)
    days_missing_b = ro(serializers.IntegerField)
    reason = ro(serializers.CharField, help_text='"" when decomposed')


class OverviewCard(serializers.Serializer):
    card = ro(
        serializers.CharField,
        help_text="spend, cost_per_1k_requests, cost_per_1m_tokens or requests",
    )
    label = ro(serializers.CharField, help_text="as the page titles the card")
    unit = ro(serializers.CharField, help_text="money, money_unit or count")
    currency = ro(serializers.CharField)
    value = Money(help_text="over the cards' days")
    previous = Money(help_text="over as many days before them; null: no figure")
    change = Number(help_text="relative (0.14 is +14%); null: not comparable")
    basis = ro(serializers.CharField, help_text="direct: idle and unallocated left out")
    window_start = ro(serializers.DateField)
    window_end = ro(serializers.DateField, help_text="exclusive")
    start = ro(serializers.DateField, help_text="the cards' days: the window's last 7")
    end = ro(serializers.DateField, help_text="exclusive: the window's end")
    previous_start = ro(serializers.DateField)
    previous_end = ro(serializers.DateField, help_text="exclusive: start")
    days = ro(serializers.IntegerField)
    covered = ro(serializers.IntegerField, help_text="days with a figure")
    previous_covered = ro(serializers.IntegerField)
    clocks = ro(serializers.CharField, help_text="final, estimated, provisional")
    previous_clocks = ro(serializers.CharField)
    partial_today = ro(
        serializers.BooleanField, help_text="the days reach into today: partial"
    )


class Problem(serializers.Serializer):
    detail = ro(serializers.CharField)


class QueryProblem(Problem):
    errors = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        read_only=True,
        help_text="per parameter: messages naming the parameter and its value",
    )
