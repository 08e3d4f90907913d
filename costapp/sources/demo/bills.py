"""The demo's bills as Cost Explorer response pages (amortized and unblended,
an RI fee on the 1st of each month, a monthly credit, one day of lag, the last
two billed days estimated), parsed by
``costapp.sources.cost_explorer.records_from_response``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from costapp.catalog import LIST_PRICES
from costapp.sources.base import Batch, Record
from costapp.sources.cost_explorer import records_from_response
from costapp.sources.demo.story import ACCOUNT_ID, DAY, HOUR, POOL_NODES_MIG, TAG_KEY
from costapp.sources.demo.telemetry import _Simulated

PAGE_DAYS = 7
BILL_LAG_DAYS = 1  # the newest day is billed on a later load, as in Cost Explorer
EC2 = "Amazon Elastic Compute Cloud - Compute"
EC2_OTHER = "EC2 - Other"
EKS = "Amazon Elastic Container Service for Kubernetes"


def bill_batches(
    simulated: list[_Simulated], t_first: int, t_last: int, *, end: datetime
) -> Iterator[Batch]:
    usage, covered = _usage_days(simulated, t_first, t_last, end=end)
    fees, credits = _monthly_days(t_first, t_last, end=end)
    for request, group_by, record_type in (
        (usage, [{"Type": "DIMENSION", "Key": "SERVICE"}, {"Type": "TAG", "Key": TAG_KEY}], "Usage"),
        (covered, [{"Type": "DIMENSION", "Key": "SERVICE"}, {"Type": "TAG", "Key": TAG_KEY}], "DiscountedUsage"),
        (fees, [{"Type": "DIMENSION", "Key": "SERVICE"}, {"Type": "DIMENSION", "Key": "USAGE_TYPE"}], "RIFee"),
        (credits, [{"Type": "DIMENSION", "Key": "SERVICE"}, {"Type": "DIMENSION", "Key": "USAGE_TYPE"}], "Credit"),
    ):  # fmt: skip
        for page in _pages(request, group_by):
            records: list[Record] = list(
                records_from_response(
                    page,
                    account_id=ACCOUNT_ID,
                    group_by=group_by,
                    record_type=record_type,
                )
            )
            yield Batch(records=records)


def _estimated(day_t: int, end: datetime) -> bool:
    return day_t >= int(end.timestamp()) - (BILL_LAG_DAYS + 2) * DAY


def _amount(value: Decimal, unit: str = "USD") -> dict[str, str]:
    return {"Amount": f"{value.quantize(Decimal('1E-10'))}", "Unit": unit}


def _usage_days(
    simulated: list[_Simulated], t_first: int, t_last: int, *, end: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """ResultsByTime for GroupBy SERVICE + TAG, RECORD_TYPE Usage, and
    RECORD_TYPE DiscountedUsage (the reserved instances' hours)."""
    by_name = {s.spec.name: s for s in simulated}
    chat = by_name["chat"]
    results, covered_results = [], []
    for day_t in range(t_first, t_last, DAY):
        day = datetime.fromtimestamp(day_t, UTC).date()
        hours = range(day_t, day_t + DAY, HOUR)
        groups: list[dict[str, Any]] = []
        covered_groups: list[dict[str, Any]] = []

        def add(
            service: str,
            tag: str,
            amortized: Decimal,
            unblended: Decimal,
            quantity: Decimal,
            unit: str,
            groups: list[dict[str, Any]] = groups,
        ) -> None:
            groups.append(
                {
                    "Keys": [service, f"{TAG_KEY}${tag}"],
                    "Metrics": {
                        "AmortizedCost": _amount(amortized),
                        "BlendedCost": _amount(unblended),
                        "UnblendedCost": _amount(unblended),
                        "UsageQuantity": _amount(quantity, unit),
                    },
                }
            )

        # p5 pool: whole nodes, and the cluster autoscaler keeps a node an
        # hour after its last replica left, so the pool has idle node-hours.
        needed = [math.ceil(chat.slot_hours[h] * 4 / 8) for h in hours]
        before = math.ceil(chat.slot_hours.get(day_t - HOUR, needed[0]) * 4 / 8)
        nodes = [max(n, p) for n, p in zip(needed, [before, *needed[:-1]], strict=True)]
        p5_hours = Decimal(sum(nodes))
        p5 = p5_hours * _list_price("p5.48xlarge", day)
        add(EC2, "p5-chat", p5, p5, p5_hours, "Hrs")
        mig_hours = Decimal(24 * POOL_NODES_MIG)
        mig = mig_hours * _list_price("p4de.24xlarge", day)
        add(EC2, "a100-mig", mig, mig, mig_hours, "Hrs")
        ebs_hours = p5_hours + mig_hours
        for name in ("summarize", "classify"):
            sim = by_name[name]
            inst_hours = Decimal(sum(sim.slot_hours[h] for h in hours))
            price = _list_price(sim.spec.instance_type, day)
            covered = Decimal(0)
            if name == "summarize":
                # Two reserved g6e.xlarge (no upfront, 38% off) cover the
                # floor: their usage is 0 unblended, the fee is amortized in.
                covered = Decimal(48)
                reserved = covered * price * Decimal("0.62")
                add(EC2, name, reserved, Decimal(0), covered, "Hrs", covered_groups)
            on_demand_hours = inst_hours - covered
            on_demand = on_demand_hours * price
            add(EC2, name, on_demand, on_demand, on_demand_hours, "Hrs")
            ebs_hours += inst_hours
        # EBS volumes and data transfer: small, proportional to nodes/traffic.
        for tag, node_hours in (
            ("p5-chat", p5_hours),
            ("a100-mig", mig_hours),
            ("summarize", Decimal(sum(by_name["summarize"].slot_hours[h] for h in hours))),
            ("classify", Decimal(sum(by_name["classify"].slot_hours[h] for h in hours))),
        ):  # fmt: skip
            served = sum(
                r.requests_stop + r.requests_length
                for s in simulated
                if (s.spec.pool or s.spec.name) == tag
                for h in hours
                if (r := s.hour_records.get(h)) is not None
            )
            other = node_hours * Decimal("0.0137") + Decimal(
                str(round(served * 9e-7, 10))
            )
            add(EC2_OTHER, tag, other, other, node_hours, "N/A")
        eks = Decimal("2.4")  # the cluster itself: nobody's, on purpose
        add(EKS, "", eks, eks, Decimal(24), "Hrs")
        results.append(_result(day_t, groups, end=end))
        covered_results.append(_result(day_t, covered_groups, end=end))
    return results, covered_results


def _monthly_days(
    t_first: int, t_last: int, *, end: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """RI fee (unblended on the 1st, amortized into usage) and a credit."""
    fees, credits = [], []
    price = _list_price("g6e.xlarge", end.date())
    for day_t in range(t_first, t_last, DAY):
        day = datetime.fromtimestamp(day_t, UTC).date()
        fee_groups: list[dict[str, Any]] = []
        credit_groups: list[dict[str, Any]] = []
        if day.day == 1:
            next_month = (day.replace(day=28) + timedelta(days=4)).replace(day=1)
            hours = Decimal(24 * (next_month - day).days * 2)
            fee = hours * price * Decimal("0.62")
            fee_groups.append(
                {
                    "Keys": [EC2, "HeavyUsage:g6e.xlarge"],
                    "Metrics": {
                        "AmortizedCost": _amount(Decimal(0)),
                        "UnblendedCost": _amount(fee),
                        "UsageQuantity": _amount(hours, "Hrs"),
                    },
                }
            )
            credit = Decimal("-500")
            credit_groups.append(
                {
                    "Keys": [EC2, "USE1-PromotionalCredit"],
                    "Metrics": {
                        "AmortizedCost": _amount(credit),
                        "UnblendedCost": _amount(credit),
                        "UsageQuantity": _amount(Decimal(0), "N/A"),
                    },
                }
            )
        fees.append(_result(day_t, fee_groups, end=end))
        credits.append(_result(day_t, credit_groups, end=end))
    return fees, credits


def _result(
    day_t: int, groups: list[dict[str, Any]], *, end: datetime
) -> dict[str, Any]:
    start = datetime.fromtimestamp(day_t, UTC).date()
    return {
        "TimePeriod": {
            "Start": start.isoformat(),
            "End": (start + timedelta(days=1)).isoformat(),
        },
        "Total": {},
        "Groups": groups,
        "Estimated": _estimated(day_t, end),
    }


def _pages(
    results: list[dict[str, Any]], group_by: list[dict[str, str]]
) -> Iterator[dict[str, Any]]:
    """GetCostAndUsage response pages, NextPageToken on all but the last."""
    for i in range(0, len(results), PAGE_DAYS):
        page: dict[str, Any] = {
            "GroupDefinitions": group_by,
            "ResultsByTime": results[i : i + PAGE_DAYS],
            "DimensionValueAttributes": [],
            "ResponseMetadata": {"HTTPStatusCode": 200},
        }
        if i + PAGE_DAYS < len(results):
            page["NextPageToken"] = f"demo-page-{i // PAGE_DAYS + 1}"
        yield page


def _list_price(instance_type: str, day: date) -> Decimal:
    """The on-demand price in force that day (the catalogue is dated)."""
    prices = [
        p
        for p in LIST_PRICES
        if p.instance_type == instance_type and p.effective_from <= day
    ]
    if not prices:
        raise ValueError(f"no list price for {instance_type} on {day}")
    return max(prices, key=lambda p: p.effective_from).price_per_hour
