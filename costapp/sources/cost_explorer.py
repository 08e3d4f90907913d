"""AWS Cost Explorer (``ce.get_cost_and_usage``) as a source.

Amounts arrive as strings with about ten decimals and are kept as Decimal at
that precision. Days are UTC; TimePeriod End is exclusive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from costapp.sources.base import CostRecord

# Cost Explorer metric name -> CostRecord field.
METRIC_FIELDS = {
    "UnblendedCost": "unblended_cost",
    "AmortizedCost": "amortized_cost",
    "NetAmortizedCost": "net_amortized_cost",
    "NetUnblendedCost": "net_unblended_cost",
    "UsageQuantity": "usage_quantity",
}
# RECORD_TYPE dimension values -> our record types.
RECORD_TYPES = {
    "Usage": "usage",
    "DiscountedUsage": "usage",
    "SavingsPlanCoveredUsage": "usage",
    "RIFee": "fee",
    "SavingsPlanRecurringFee": "fee",
    "SavingsPlanUpfrontFee": "fee",
    "Fee": "fee",
    "Credit": "credit",
    "Refund": "refund",
    "Tax": "tax",
    "SavingsPlanNegation": "discount",
    "BundledDiscount": "discount",
    "Discount": "discount",
}


def _parse_start(value: str) -> tuple[datetime, str]:
    """'2025-01-02' (DAILY) or '2025-01-02T05:00:00Z' (HOURLY)."""
    if "T" in value:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(
            UTC
        ), "hour"
    return datetime.fromisoformat(value).replace(tzinfo=UTC), "day"


def records_from_response(
    response: Mapping[str, Any],
    *,
    account_id: str,
    group_by: Iterable[Mapping[str, str]] = (),
    record_type: str | None = None,
) -> list[CostRecord]:
    """Turn one page of GetCostAndUsage into records.

    ``group_by`` is the request's GroupBy list (at most two): each group key in
    the response is matched to it by position. Supported dimensions:
    SERVICE, USAGE_TYPE, LINKED_ACCOUNT, RECORD_TYPE, REGION, RESOURCE_ID and
    TAG (``Key$Value``; an empty value means the line carries no such tag).
    ``record_type`` applies when RECORD_TYPE is filtered rather than grouped.
    """
    keys = list(group_by)
    records: list[CostRecord] = []
    for result in response.get("ResultsByTime", []):
        start, granularity = _parse_start(result["TimePeriod"]["Start"])
        estimated = bool(result.get("Estimated", False))
        groups = result.get("Groups") or []
        if not groups and not keys:
            groups = [{"Keys": [], "Metrics": result.get("Total", {})}]
        for group in groups:
            fields: dict[str, Any] = {
                "account_id": account_id,
                "period_start": start,
                "granularity": granularity,
                "service": "",
                "estimated": estimated,
                "record_type": RECORD_TYPES.get(record_type or "Usage", "other"),
            }
            for spec, value in zip(keys, group.get("Keys", []), strict=False):
                kind, key = spec["Type"], spec["Key"]
                if kind == "TAG":
                    tag_key, _, tag_value = value.partition("$")
                    fields["tag_key"], fields["tag_value"] = tag_key or key, tag_value
                elif key == "SERVICE":
                    fields["service"] = value
                elif key == "USAGE_TYPE":
                    fields["usage_type"] = value
                elif key == "LINKED_ACCOUNT":
                    fields["account_id"] = value
                elif key == "RECORD_TYPE":
                    fields["record_type"] = RECORD_TYPES.get(value, "other")
                elif key == "REGION":
                    fields["region"] = value
                elif key == "RESOURCE_ID":
                    fields["resource_id"] = value
                else:
                    raise ValueError(f"GroupBy {kind}:{key} is not supported")
            currency = ""
            for metric, amount in group.get("Metrics", {}).items():
                field = METRIC_FIELDS.get(metric)
                if field is None:
                    continue
                fields[field] = Decimal(amount["Amount"])
                if metric == "UsageQuantity":
                    fields["usage_unit"] = amount.get("Unit", "")
                elif amount.get("Unit"):
                    currency = amount["Unit"]
            fields["currency"] = currency or "USD"
            records.append(CostRecord(**fields))
    return records
