"""Unit economics as stored: one row per series and period, and budgets.

A figure is derived: ``economics.unit_costs.services.unit_costs_recompute``
writes it from telemetry, the allocated bill and the rate card through
``analytics``; nothing else writes it, and a full recompute rebuilds every
row. Missing is NULL, never 0: a day without GPU-hours has no cost, a day
under the minimum volume has no unit cost.
"""

from __future__ import annotations

from django.db import models

from costapp.models.costs import money_field

SCOPES = [
    ("deployment", "deployment"),
    ("pool", "pool"),
    ("team", "team"),
    ("fleet", "fleet"),
]
GRAINS = [("hour", "hour"), ("day", "day"), ("week", "week"), ("month", "month")]
CLOCKS = [
    ("provisional", "provisional (GPU-hours x rate)"),
    ("estimated", "estimated bill"),
    ("final", "final bill"),
]
# The clocks as pages name them, most final first (a card lists them in this order).
CLOCK_LABELS = {"final": "final bill", "estimated": "estimated bill",
                "provisional": "provisional"}  # fmt: skip
FLAGS = [
    ("", "in band"),
    ("anomaly", "cost anomaly"),
    ("traffic", "traffic change"),
    ("size", "request size change"),
    ("saving", "saving"),
    ("check", "check data"),
    ("price", "known price change"),
]
FLEET = "fleet"  # the name of the one fleet series
FIGURE_NATURAL_KEY = ("scope", "name", "grain", "period_start", "currency")


class UnitCostFigure(models.Model):
    scope = models.CharField(max_length=16, choices=SCOPES)
    name = models.CharField(max_length=100)
    grain = models.CharField(max_length=8, choices=GRAINS)
    period_start = models.DateTimeField()  # UTC hour or UTC midnight
    currency = models.CharField(max_length=3, default="USD")
    clock = models.CharField(max_length=16, choices=CLOCKS)
    # Where the price came from: bill, effective (learnt from final bill
    # days), rate_card, none; mixed for aggregates of several.
    rate_source = models.CharField(max_length=16, blank=True)
    # Additive parts: they sum across hours, days and deployments.
    cost = money_field(null=True, blank=True)
    list_cost = money_field(null=True, blank=True)  # GPU-hours x rate card
    idle_cost = money_field(null=True, blank=True)  # pool __idle__ included
    unallocated_cost = money_field(null=True, blank=True)
    gpu_hours = models.FloatField(null=True, blank=True)
    prompt_tokens = models.FloatField(null=True, blank=True)
    generation_tokens = models.FloatField(null=True, blank=True)
    requests = models.FloatField(null=True, blank=True)  # finished: stop + length
    requests_length = models.FloatField(null=True, blank=True)
    replicas = models.FloatField(null=True, blank=True)
    # Unit figures (NULL under the minimum volume or where an input is missing).
    cost_per_1k_requests = models.FloatField(null=True, blank=True)
    cost_per_1m_tokens = models.FloatField(null=True, blank=True)
    cost_per_gpu_hour = models.FloatField(null=True, blank=True)
    tokens_per_gpu_second = models.FloatField(null=True, blank=True)
    effective_rate = models.FloatField(null=True, blank=True)
    # Baseline of $ per 1k requests and its band; flag and explanation.
    baseline = models.FloatField(null=True, blank=True)
    lower = models.FloatField(null=True, blank=True)
    upper = models.FloatField(null=True, blank=True)
    # The same baseline state per 1M tokens (cost over tokens of the EWMA).
    baseline_per_1m_tokens = models.FloatField(null=True, blank=True)
    # Its band (sigma of ln $/token; flags stay on $ per 1k requests). Days
    # and hours only: a week or month carries its baseline, not a band.
    lower_per_1m_tokens = models.FloatField(null=True, blank=True)
    upper_per_1m_tokens = models.FloatField(null=True, blank=True)
    flag = models.CharField(max_length=8, choices=FLAGS, blank=True)
    cause = models.TextField(blank=True)
    # LMDI parts in $ per 1k requests (price, fleet, traffic, size, cost).
    parts = models.JSONField(default=dict, blank=True)
    level_shift = models.BooleanField(default=False)
    warm = models.BooleanField(default=False)
    # Why a figure is missing ("GPU-hours unknown", "no rate card") or what
    # the detection could not do ("no gpu_hours: ...").
    note = models.CharField(max_length=300, blank=True)
    computed_at = models.DateTimeField()
    # False while the period is open or its telemetry was read before it
    # closed (its end plus the settle delay): shown as partial, never judged
    # by an alert rule.
    complete = models.BooleanField(default=True)
    # When the figure first stood with these values for its closed period
    # (kept across recomputes that leave them unchanged): an alert evaluation
    # after it has judged it; a later value is new and may page, late.
    known_since = models.DateTimeField(null=True, blank=True)

    NATURAL_KEY = FIGURE_NATURAL_KEY

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=list(FIGURE_NATURAL_KEY), name="unitcostfigure_natural_key"
            )
        ]
        indexes = [
            models.Index(fields=["scope", "grain", "period_start"]),
            models.Index(fields=["grain", "flag"]),
        ]
        ordering = ["scope", "name", "grain", "period_start"]

    def __str__(self) -> str:
        return (
            f"{self.scope} {self.name} {self.grain} {self.period_start:%Y-%m-%d %H:00}"
        )


class TeamHoliday(models.Model):
    """A team's holiday calendar from the fleet file (``holidays:``): either a
    country (and subdivision) whose public holidays the ``holidays`` package
    knows, or one day the user keeps. ``team`` ``*`` is every team. The fleet
    load replaces every row; the recompute turns them into days
    (``analytics.calendar.holiday_calendar``)."""

    ALL_TEAMS = "*"

    team = models.CharField(max_length=100)
    country = models.CharField(max_length=8, blank=True)
    subdiv = models.CharField(max_length=16, blank=True)
    day = models.DateField(null=True, blank=True)
    name = models.CharField(max_length=100, blank=True)

    class Meta:
        ordering = ["team", "day", "country"]

    def __str__(self) -> str:
        what = self.country + (f"-{self.subdiv}" if self.subdiv else "")
        return f"{self.team} {self.day or what}"


class BaselineCheckpoint(models.Model):
    """The baselines' state (``analytics.baselines.BaselineState``, npz bytes)
    of every series of a grain at the start of ``day``, so an incremental
    recompute resumes there instead of re-running the whole history."""

    grain = models.CharField(max_length=8, choices=GRAINS)
    day = models.DateField()
    state = models.BinaryField()
    computed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["grain", "day"], name="baselinecheckpoint_natural_key"
            )
        ]
        ordering = ["grain", "day"]

    def __str__(self) -> str:
        return f"{self.grain} state at {self.day}"


class Budget(models.Model):
    """A monthly spend budget for a team, a deployment or the fleet."""

    SCOPES = [("team", "team"), ("deployment", "deployment"), ("fleet", "fleet")]

    scope = models.CharField(max_length=16, choices=SCOPES)
    name = models.CharField(max_length=100)
    monthly_amount = money_field()
    currency = models.CharField(max_length=3, default="USD")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "name", "currency"], name="budget_natural_key"
            )
        ]
        ordering = ["scope", "name"]

    def __str__(self) -> str:
        return f"{self.scope} {self.name} {self.monthly_amount} {self.currency}/month"


# --- idle in dollars (issue 9): written by economics.idle.services ----------------

IDLE_KINDS = [
    ("paid", "paid, no replica used it"),
    ("headroom", "serving below capacity at the target utilisation"),
]
IDLE_METHODS = [
    ("bill", "from the allocated bill"),
    ("roofline", "roofline capacity, uncalibrated"),
    ("calibrated", "calibrated capacity"),
]
IDLE_NATURAL_KEY = ("scope", "name", "day", "kind", "currency")


class IdleFigure(models.Model):
    """Idle GPU-hours and their dollars per deployment or pool and UTC day.

    ``paid``: GPU-hours paid that no replica used (a pool's ``__idle__``; for
    a deployment outside pools, billed instance GPU-hours minus measured).
    ``headroom``: serving GPU-hours the capacity model says were not needed at
    the target utilisation. NULL is unknown (a scrape gap, no capacity
    model), never 0; ``note`` says why.
    """

    scope = models.CharField(max_length=16, choices=SCOPES[:2])
    name = models.CharField(max_length=100)
    day = models.DateField()  # UTC
    kind = models.CharField(max_length=8, choices=IDLE_KINDS)
    currency = models.CharField(max_length=3, default="USD")
    gpu_hours = models.FloatField(null=True, blank=True)
    amount = money_field(null=True, blank=True)
    method = models.CharField(max_length=12, choices=IDLE_METHODS)
    # ["model_underestimates"], ["estimated_bill"], ...
    flags = models.JSONField(default=list, blank=True)
    # Headroom: capacity per replica (requests/s within the SLA) and target.
    capacity_per_replica = models.FloatField(null=True, blank=True)
    target_utilisation = models.FloatField(null=True, blank=True)
    note = models.CharField(max_length=300, blank=True)
    computed_at = models.DateTimeField()

    NATURAL_KEY = IDLE_NATURAL_KEY

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=list(IDLE_NATURAL_KEY), name="idlefigure_natural_key"
            )
        ]
        indexes = [models.Index(fields=["day", "kind"])]
        ordering = ["scope", "name", "day", "kind"]

    def __str__(self) -> str:
        return f"{self.scope} {self.name} {self.day} {self.kind}"


# --- the month-end forecast (issue 12): written by unit_costs_recompute ------------

MONTH_FORECAST_NATURAL_KEY = ("scope", "name", "currency", "month")


class MonthForecastFigure(models.Model):
    """One series' month-end spend forecast (``analytics.forecast``) as of the
    latest data day, so pages read it instead of simulating per request.

    Budget-free: a budget's share (``point`` over the amount) and burn date
    (the first day ``path`` reaches the amount) are taken at read time, so an
    edited budget needs no recompute. The figures are the simulation's
    estimates (floats, like a figure's baseline and band), not ledger money.
    One row per series and month; the recompute replaces it.
    """

    scope = models.CharField(max_length=16, choices=SCOPES)
    name = models.CharField(max_length=100)
    currency = models.CharField(max_length=3, default="USD")
    month = models.DateField()  # first day
    as_of = models.DateField()  # last day in spend to date
    to_date = models.FloatField()
    remaining_days = models.PositiveSmallIntegerField()
    point = models.FloatField()
    lower = models.FloatField()
    upper = models.FloatField()
    interval = models.FloatField()
    burn_rate = models.FloatField(null=True, blank=True)  # NULL: no day this month
    method = models.CharField(max_length=20)
    lumps_expected = models.FloatField(default=0.0)
    # [[ISO day, cumulative spend], ...]: actual to as_of, then the simulated mean.
    path = models.JSONField(default=list, blank=True)
    computed_at = models.DateTimeField()

    NATURAL_KEY = MONTH_FORECAST_NATURAL_KEY

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=list(MONTH_FORECAST_NATURAL_KEY),
                name="monthforecastfigure_natural_key",
            )
        ]
        ordering = ["scope", "name", "currency", "month"]

    def __str__(self) -> str:
        return f"{self.scope} {self.name} {self.month:%Y-%m} as of {self.as_of}"
