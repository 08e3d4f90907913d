"""Bill lines, the sources that own an account's period, and the rate card."""

from __future__ import annotations

from typing import Any

from django.db import models

# Cost Explorer sends about ten decimals; keep two more so nothing is rounded
# before it is shown.
MONEY_DIGITS, MONEY_PLACES = 28, 12


def money_field(**kwargs: Any) -> models.DecimalField:
    return models.DecimalField(
        max_digits=MONEY_DIGITS, decimal_places=MONEY_PLACES, **kwargs
    )


SOURCES = [
    ("cost_explorer", "AWS Cost Explorer"),
    ("focus", "FOCUS export"),
    ("demo", "demo fleet"),
]
RECORD_TYPES = [
    ("usage", "usage"),
    ("fee", "fee"),
    ("credit", "credit"),
    ("refund", "refund"),
    ("tax", "tax"),
    ("discount", "discount"),
    ("other", "other"),
]
# The commitment a line belongs to: usage it covered, its fee (the unused part
# of the commitment in the amortized view), a savings plan's negation. ""
# for lines no commitment touches (on-demand usage, credits, tax).
COMMITMENTS = [
    ("", "none"),
    ("savings_plan", "savings plan"),
    ("reserved", "reserved instance"),
]
GRANULARITIES = [("day", "day"), ("hour", "hour")]
# What makes a bill line the same line when a source sends it again.
COSTLINE_NATURAL_KEY = (
    "source",
    "account_id",
    "granularity",
    "period_start",
    "service",
    "usage_type",
    "record_type",
    # Usage a savings plan covered and on-demand usage of the same usage type
    # and day are two lines, not one.
    "commitment",
    "resource_id",
    "tag_key",
    "tag_value",
    "currency",
)


class CostLine(models.Model):
    """One line of a bill at the source's grain and precision.

    Empty strings, not NULLs, fill the natural key so the unique constraint
    holds (NULLs are distinct in SQL unique indexes).
    """

    source = models.CharField(max_length=16, choices=SOURCES)
    account_id = models.CharField(max_length=32)
    granularity = models.CharField(max_length=8, choices=GRANULARITIES, default="day")
    period_start = models.DateTimeField()  # UTC day or hour start
    service = models.CharField(max_length=200)
    usage_type = models.CharField(max_length=200, blank=True)
    record_type = models.CharField(max_length=16, choices=RECORD_TYPES, default="usage")
    commitment = models.CharField(
        max_length=16, choices=COMMITMENTS, blank=True, default="", db_default=""
    )
    resource_id = models.CharField(max_length=500, blank=True)
    tag_key = models.CharField(max_length=128, blank=True)
    tag_value = models.CharField(max_length=256, blank=True)
    region = models.CharField(max_length=32, blank=True)
    currency = models.CharField(max_length=3, default="USD")
    unblended_cost = money_field(null=True, blank=True)
    amortized_cost = money_field(null=True, blank=True)
    net_amortized_cost = money_field(null=True, blank=True)
    net_unblended_cost = money_field(null=True, blank=True)
    # FOCUS: BilledCost ~ unblended, EffectiveCost ~ amortized.
    billed_cost = money_field(null=True, blank=True)
    effective_cost = money_field(null=True, blank=True)
    list_cost = money_field(null=True, blank=True)
    usage_quantity = money_field(null=True, blank=True)
    usage_unit = models.CharField(max_length=32, blank=True)
    estimated = models.BooleanField(default=False)
    # An amount above COSTAPP_BILL_REVIEW_THRESHOLD_USD: imported (a real
    # all-upfront fee can be that large) but shown for someone to check.
    needs_review = models.BooleanField(default=False, db_default=False)
    fetched_at = models.DateTimeField()
    run = models.ForeignKey(
        "costapp.IngestRun", null=True, blank=True, on_delete=models.SET_NULL
    )

    NATURAL_KEY = COSTLINE_NATURAL_KEY

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=list(COSTLINE_NATURAL_KEY),
                name="costline_natural_key",
            )
        ]
        indexes = [models.Index(fields=["account_id", "period_start"])]

    def __str__(self) -> str:
        return f"{self.account_id} {self.period_start:%Y-%m-%d} {self.service} {self.usage_type}"


class BillingPeriodSource(models.Model):
    """One source of truth per account and billing month.

    The same account must never count from both Cost Explorer and a FOCUS
    export; the first source to claim a period owns it.
    """

    account_id = models.CharField(max_length=32)
    billing_period = models.DateField()  # first day of the month, UTC
    source = models.CharField(max_length=16, choices=SOURCES)
    claimed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["account_id", "billing_period"], name="one_source_per_period"
            )
        ]

    def __str__(self) -> str:
        return f"{self.account_id} {self.billing_period:%Y-%m} from {self.source}"


class RateCard(models.Model):
    """A dated price: on-demand list price or a contract price a user entered.

    The provisional clock (measured GPU-hours x rate) uses it until the bill for
    the day arrives; it is the only source for bare metal and on-premises fleets.
    """

    KINDS = [("list", "on-demand list"), ("contract", "contract")]
    UNITS = [("instance_hour", "per instance-hour"), ("gpu_hour", "per GPU-hour")]

    gpu_type = models.CharField(max_length=32)
    instance_type = models.CharField(max_length=64, blank=True)
    region = models.CharField(max_length=32, default="us-east-1")
    kind = models.CharField(max_length=16, choices=KINDS, default="list")
    unit = models.CharField(max_length=16, choices=UNITS, default="instance_hour")
    gpus_per_unit = models.PositiveSmallIntegerField(default=1)
    price = money_field()
    currency = models.CharField(max_length=3, default="USD")
    effective_from = models.DateField()
    source = models.CharField(max_length=500)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "gpu_type",
                    "instance_type",
                    "region",
                    "kind",
                    "effective_from",
                ],
                name="ratecard_natural_key",
            )
        ]
        ordering = ["gpu_type", "-effective_from"]

    def __str__(self) -> str:
        return f"{self.gpu_type} {self.instance_type} {self.kind} from {self.effective_from}"


class CostShareDay(models.Model):
    """A UTC day whose allocation is stored in ``CostShare`` (every account,
    currency and basis of the day, plus the deployments' usage that day).

    Any write to a bill line or a deployment-hour of the day deletes this row
    in the writer's transaction (triggers, migration 0012). ``computed_at`` is
    taken before the inputs were read, so a run that finished after it may
    have changed them; ``rules_digest`` is the digest of the rules, pools and
    nominal sizes the shares were computed with. A day whose row is missing
    or stale by either is allocated on the fly instead
    (``costapp.costs.shares``).
    """

    day = models.DateField(unique=True)
    computed_at = models.DateTimeField()
    rules_digest = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"shares of {self.day} at {self.computed_at:%Y-%m-%d %H:%M:%S}"


class CostShare(models.Model):
    """One share of one bill line in one basis (``analytics.allocation.Share``).

    ``line_id`` is the CostLine's pk when the share was computed, on purpose
    not a foreign key: an ingest's delete of restated lines never has to
    touch this table, and the day is stale by its run until recomputed.
    """

    BASES = [
        ("amortized", "amortized"),
        ("unblended", "unblended"),
        ("net_amortized", "net amortized"),
    ]

    day = models.DateField()
    account_id = models.CharField(max_length=32)
    currency = models.CharField(max_length=3)
    basis = models.CharField(max_length=16, choices=BASES)
    line_id = models.BigIntegerField()
    target = models.CharField(max_length=100)  # deployment, __idle__, __unallocated__
    pool = models.CharField(max_length=100, blank=True)
    how = models.CharField(max_length=16)
    amount = money_field()

    class Meta:
        # The order the readers ask for (a day's shares by account, currency,
        # then allocation order): an index scan, no sort.
        indexes = [
            models.Index(
                fields=["basis", "day", "account_id", "currency", "id"],
                name="costshare_read_order",
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.account_id} {self.basis} {self.target} {self.amount}"


class CostExportDay(models.Model):
    """A UTC day whose finance export rows are stored (``CostExportRow``),
    with the digest of the fleet and rate card they were built with
    (``export.day_rows.DayRows.digest``). Written in the transaction that stores
    the day's shares; read only while the day's ``CostShareDay`` holds too.
    (Its own table, not a column of ``CostShareDay``: SQLite rebuilds a table
    to add a column, which the bill lines' triggers on it do not survive.)"""

    day = models.DateField(unique=True)
    digest = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"export rows of {self.day}"


class CostExportRow(models.Model):
    """One row of the finance export by deployment for one day and basis, as
    ``costapp.costs.export.day_rows`` built it when the day's shares were stored
    (``export.rows.STORED_COLUMNS``; ``position`` is its place in the day's
    export order). Read only for a day whose ``CostShareDay`` holds and
    whose ``CostExportDay`` has today's digest: a year's export reads these
    rows instead of rebuilding them from the shares."""

    day = models.DateField()
    basis = models.CharField(max_length=16, choices=CostShare.BASES)
    position = models.PositiveIntegerField()
    account_id = models.CharField(max_length=32)
    currency = models.CharField(max_length=3)
    target = models.CharField(max_length=100)
    pool = models.CharField(max_length=100, blank=True)
    allocation = models.TextField()
    status = models.CharField(max_length=16)
    bill_amount = money_field(null=True)
    provisional_cost = money_field(null=True)
    requests = models.FloatField(null=True)
    prompt_tokens = models.FloatField(null=True)
    generation_tokens = models.FloatField(null=True)
    gpu_hours = models.FloatField(null=True)
    nominal_gpu_hours = models.PositiveIntegerField(default=0)
    cost_per_1k_requests = money_field(null=True)
    cost_per_1m_tokens = money_field(null=True)
    cost_per_gpu_hour = money_field(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["basis", "day", "position"], name="costexportrow_read_order"
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.basis} {self.target} {self.bill_amount}"


class CostUsageDay(models.Model):
    """A deployment's measured day as the allocation used it (``UsageDay``:
    GPU-hours with unknown hours at nominal size, finished requests) plus its
    tokens, stored with the day's shares so the export reads both at once."""

    day = models.DateField()
    deployment = models.CharField(max_length=100)
    gpu_hours = models.DecimalField(max_digits=20, decimal_places=6)
    requests = models.DecimalField(max_digits=20, decimal_places=0)
    nominal_hours = models.PositiveIntegerField(default=0)
    prompt_tokens = models.FloatField(default=0)
    generation_tokens = models.FloatField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "deployment"], name="costusageday_natural_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.deployment} {self.gpu_hours} GPU-h"
