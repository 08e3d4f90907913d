"""Alerts as stored: rules, channels, per-(rule, scope) state, events, the
delivery outbox and silences.

A ``Delivery`` is written before anything is sent (the outbox): a worker that
dies after sending leaves the row in "sending", and the reaper re-sends it with
the same ``webhook_id`` (receivers dedupe on it). ``AlertState.version`` is the
claim: a transition is recorded only by the evaluation whose conditional
``UPDATE ... WHERE version = v`` changed exactly one row.
"""

from __future__ import annotations

from django.db import models

METRICS = [
    ("cost_per_1k_requests", "cost per 1k requests"),
    ("cost_per_1m_tokens", "cost per 1M tokens"),
    ("daily_spend", "daily spend"),
    ("budget_burn", "budget burn (% of the month's budget spent)"),
    ("idle_cost", "idle dollars"),
    ("staleness", "telemetry staleness (hours since a deployment's newest sample)"),
    ("bill_staleness", "bill staleness (hours since an account's newest bill day)"),
    (
        "budget_forecast",
        "budget forecast (month-end forecast as a share of the budget)",
    ),
    (
        "budget_forecast_lower",
        "budget forecast, 80% lower bound (as a share of the budget)",
    ),
]
# Metrics about data arriving, not figures: evaluated on the clock.
STALENESS_METRICS = ("staleness", "bill_staleness")
# The month-end forecast against each budget in scope; threshold: a share
# (1.0 = the whole budget). Judged from the 5th, once per budget and month.
BUDGET_FORECAST_METRICS = ("budget_forecast", "budget_forecast_lower")
RULE_SCOPES = [("deployment", "deployment"), ("team", "team"), ("fleet", "fleet")]
ORIGINS = [("ui", "UI"), ("file", "fleet file")]


class Channel(models.Model):
    KINDS = [
        ("email", "email"),
        ("webhook", "webhook"),
        ("slack", "Slack"),
        ("alertmanager", "Alertmanager"),
        ("pagerduty", "PagerDuty"),
    ]

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=16, choices=KINDS)
    # JSON of the channel's settings, MultiFernet-encrypted (alerts/secrets.py):
    # the target (URL or addresses) and a webhook's signing secrets. A hook URL
    # is the credential (Slack, Discord, Teams, Google Chat) or carries one.
    config_encrypted = models.TextField()
    # What every page shows of the target, to admins too, and the only clear
    # copy: a URL as scheme://host/…/last 4 characters, email addresses in full.
    target_masked = models.CharField(max_length=300, blank=True)
    hourly_cap = models.PositiveIntegerField(default=20)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=500, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    # Consecutive permanent failures and when the first of them happened.
    permanent_failures = models.PositiveIntegerField(default=0)
    first_failure_at = models.DateTimeField(null=True, blank=True)
    origin = models.CharField(max_length=8, choices=ORIGINS, default="ui")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class AlertRule(models.Model):
    name = models.CharField(max_length=100, unique=True)
    metric = models.CharField(max_length=32, choices=METRICS)
    grain = models.CharField(
        max_length=8, choices=[("hour", "hourly (provisional)"), ("day", "daily")]
    )
    scope = models.CharField(max_length=16, choices=RULE_SCOPES, default="deployment")
    scope_name = models.CharField(max_length=100, blank=True)  # blank: every one
    condition = models.CharField(
        max_length=16,
        choices=[
            ("band", "outside the baseline band"),
            ("ratio", "ratio to baseline"),
            ("threshold", "absolute threshold"),
            ("anomaly", "flagged as a cost anomaly (band or sustained shift)"),
            (
                "price",
                "a known price change (rate card, commitment, effective rate), once",
            ),
        ],
        default="ratio",
    )
    direction = models.CharField(
        max_length=8, choices=[("above", "above"), ("below", "below")], default="above"
    )
    ratio = models.FloatField(null=True, blank=True)
    # Threshold in the metric's unit ($, %, hours for staleness).
    threshold = models.FloatField(null=True, blank=True)
    for_periods = models.PositiveIntegerField(default=1)
    keep_firing_for = models.PositiveIntegerField(null=True, blank=True)
    repeat_minutes = models.PositiveIntegerField(default=240)
    min_requests = models.FloatField(null=True, blank=True)
    include_traffic = models.BooleanField(default=False)
    notify_resolved = models.BooleanField(default=True)
    enabled = models.BooleanField(default=True)
    channels = models.ManyToManyField(Channel, blank=True, related_name="rules")
    origin = models.CharField(max_length=8, choices=ORIGINS, default="ui")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AlertRuleEvaluated(models.Model):
    """When a rule was last evaluated: figures known by then were judged, so
    a transition on them is history, not news. Its own table, which the page
    cache leaves unwatched: an evaluation every few minutes that changes
    nothing must not drop every cached page."""

    rule = models.OneToOneField(
        AlertRule, on_delete=models.CASCADE, primary_key=True, related_name="evaluated"
    )
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.rule_id} evaluated {self.at:%Y-%m-%d %H:%M}"


class AlertState(models.Model):
    STATES = [("inactive", "inactive"), ("pending", "pending"), ("firing", "firing")]
    ACTIVE = ("pending", "firing")  # what "active alerts" counts, everywhere

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="states")
    scope_name = models.CharField(max_length=200)  # a series, or a source
    state = models.CharField(max_length=16, choices=STATES, default="inactive")
    since = models.DateTimeField(null=True, blank=True)
    # Data time of the last transition recorded: later ones are new.
    data_time = models.DateTimeField(null=True, blank=True)
    last_sent = models.DateTimeField(null=True, blank=True)
    # Acknowledged by on-call: its repeats are recorded, not sent, until it
    # resolves (the resolution is sent, and clears these).
    acknowledged_by = models.CharField(max_length=150, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "scope_name"], name="alertstate_rule_scope"
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule_id} {self.scope_name} {self.state}"


class AlertEvent(models.Model):
    KINDS = [("firing", "firing"), ("repeat", "repeat"), ("resolved", "resolved")]

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="events")
    scope_name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=KINDS)
    data_time = models.DateTimeField()
    value = models.FloatField(null=True, blank=True)
    baseline = models.FloatField(null=True, blank=True)
    reason = models.CharField(max_length=200, blank=True)  # "restated", "stale"
    explanation = models.TextField(blank=True)
    figure_id = models.BigIntegerField(null=True, blank=True)  # UnitCostFigure
    # "" when it was to be sent; else why not ("historical", "silenced", ...).
    not_sent = models.CharField(max_length=100, blank=True)
    # Seconds from the period's close (end + settle delay) to this event,
    # when that is longer than the schedule promises: the data came late.
    late_s = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-data_time", "-pk"]
        indexes = [models.Index(fields=["rule", "scope_name", "data_time"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.scope_name} {self.data_time:%Y-%m-%d %H:%M}"


class Delivery(models.Model):
    PENDING, SENDING, SENT, FAILED, NOT_SENT = (
        "pending",
        "sending",
        "sent",
        "failed",
        "not_sent",
    )
    STATUSES = [(s, s) for s in (PENDING, SENDING, SENT, FAILED, NOT_SENT)]

    channel = models.ForeignKey(
        Channel, on_delete=models.CASCADE, related_name="deliveries"
    )
    events = models.ManyToManyField(AlertEvent, related_name="deliveries")
    webhook_id = models.CharField(max_length=64, unique=True)
    status = models.CharField(max_length=16, choices=STATUSES, default=PENDING)
    reason = models.CharField(max_length=200, blank=True)  # why not sent
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    is_test = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    attempted_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["status", "attempted_at"])]

    def __str__(self) -> str:
        return f"{self.webhook_id} {self.status}"


class Silence(models.Model):
    SCOPES = [("rule", "rule"), ("deployment", "deployment"), ("team", "team")]

    scope = models.CharField(max_length=16, choices=SCOPES)
    name = models.CharField(max_length=100)  # rule name, deployment, team
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    comment = models.CharField(max_length=300, blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-ends_at"]

    def __str__(self) -> str:
        return f"{self.scope} {self.name} until {self.ends_at:%Y-%m-%d %H:%M}"
