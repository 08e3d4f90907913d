"""AWS Cost Explorer (``ce.get_cost_and_usage``) as a source.

Amounts arrive as strings with about ten decimals and are kept as Decimal at
that precision. Days are UTC; TimePeriod End is exclusive.

Every request and every page costs $0.01, so the source plans its requests
before it makes them (``plan()``) and counts each one it makes
(``Batch.api_requests``). GetCostAndUsage has no boto3 paginator: pages are
followed with NextPageToken. Throttling (LimitExceededException) is retried by
botocore's "standard" retry mode. A window (one account, one calendar month
or less) is collected whole before anything is yielded, and yielded as one
batch that replaces the window: a restated day never shows both figures and a
group that vanished in the restatement vanishes here too. A
RequestChangedException (the data changed between pages) restarts the window.
Credentials and the endpoint come from boto3's own chain (environment,
profile, IAM role, ``AWS_ENDPOINT_URL``); nothing is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from analytics.errors import InvalidInput, shown
from costapp.days import day_start
from costapp.sources.base import Batch, CostRecord, ReplaceScope, SourceError, Window
from costapp.validation import ACCOUNT_ID, decimal_in

logger = logging.getLogger(__name__)
AMOUNT_PLACES = Decimal("1e-12")


class CostExplorerError(SourceError):
    """A failure that ends an account-month, carrying the requests already
    made for it: each was charged, so the run counts them (docs/costs.md)."""

    def __init__(
        self, message: str, *, permanent: bool = False, api_requests: int = 0
    ) -> None:
        super().__init__(message, permanent=permanent)
        self.api_requests = api_requests


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
# RECORD_TYPE dimension values that belong to a commitment -> which kind. In
# the amortized view a covered line carries the commitment it used and a fee
# line the part left unused (docs/costs.md, "Commitments").
COMMITMENTS = {
    "DiscountedUsage": "reserved",
    "RIFee": "reserved",
    "SavingsPlanCoveredUsage": "savings_plan",
    "SavingsPlanRecurringFee": "savings_plan",
    "SavingsPlanUpfrontFee": "savings_plan",
    "SavingsPlanNegation": "savings_plan",
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
                "commitment": COMMITMENTS.get(record_type or "Usage", ""),
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
                    fields["commitment"] = COMMITMENTS.get(value, "")
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
                try:
                    # Cost Explorer prints float residues such as
                    # "3.5527136788E-15": rounded to the column's 12 places
                    # (as PostgreSQL's NUMERIC(28, 12) did on insert), not refused.
                    value = decimal_in(
                        amount.get("Amount"), field=metric, max_places=40
                    )
                    exponent = value.as_tuple().exponent
                    if isinstance(exponent, int) and exponent < -12:
                        value = value.quantize(AMOUNT_PLACES)
                    fields[field] = value
                except InvalidInput as exc:
                    raise SourceError(
                        f"Cost Explorer sent {metric} Amount={shown(exc.value)} "
                        f"({exc.reason}) for account {account_id}, day "
                        f"{result['TimePeriod']['Start']}, group "
                        f"{shown(group.get('Keys', []))}: nothing of this month "
                        "was stored",
                        permanent=True,
                    ) from None
                if metric == "UsageQuantity":
                    fields["usage_unit"] = amount.get("Unit", "")
                elif amount.get("Unit"):
                    currency = amount["Unit"]
            fields["currency"] = currency or "USD"
            records.append(CostRecord(**fields))
    return records


NAME = "cost_explorer"
DEFAULT_METRICS = (
    "AmortizedCost",
    "UnblendedCost",
    "NetAmortizedCost",
    "UsageQuantity",
)
HOURLY_DAYS = 14  # Cost Explorer keeps hourly data for the trailing 14 days
MAX_RESTARTS = 3  # RequestChangedException restarts of one window
DEFAULT_MAX_ATTEMPTS = 6


def _families() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """RECORD_TYPE values by (our record type, commitment), named
    ``usage``, ``usage:reserved``, ``fee:savings_plan`` ...: every value of
    one family maps to the same line kind, so its first names them all."""
    grouped: dict[str, list[str]] = {}
    for aws, ours in RECORD_TYPES.items():
        commitment = COMMITMENTS.get(aws, "")
        grouped.setdefault(f"{ours}:{commitment}" if commitment else ours, []).append(
            aws
        )
    return tuple((name, tuple(values)) for name, values in grouped.items())


# One filtered query per family when RECORD_TYPE cannot be grouped (two other
# GroupBy keys are in use): covered usage, fees and negations apart from
# on-demand lines, so commitments are kept (each query is $0.01). The last
# family catches record types we do not know by name, so the bill total is
# complete whatever AWS adds.
FAMILIES = _families()
OTHER_FAMILY = ("other", ())
ALLOWED_DIMENSIONS = {"SERVICE", "USAGE_TYPE", "RECORD_TYPE", "REGION", "RESOURCE_ID"}


@dataclass(frozen=True)
class Query:
    """One planned GetCostAndUsage request (before pagination)."""

    account_id: str
    window: Window
    record_family: str  # "" when RECORD_TYPE is grouped
    request: dict[str, Any]


def month_chunks(window: Window) -> list[Window]:
    """The window cut at UTC month starts: a chunk never spans two billing
    periods, so it replaces exactly one account-period's lines."""
    chunks: list[Window] = []
    start = window.start
    while start < window.end:
        first = day_start(start).replace(day=1)
        nxt = (first + timedelta(days=32)).replace(day=1)
        end = min(nxt, window.end)
        chunks.append(Window(start, end))
        start = end
    return chunks


def _time(value: datetime, granularity: str) -> str:
    if granularity == "HOURLY":
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    return value.strftime("%Y-%m-%d")


def _validate_group_by(group_by: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    out = []
    for spec in group_by:
        kind, key = spec.get("Type", ""), spec.get("Key", "")
        if kind == "TAG":
            if not key:
                raise SourceError("group_by TAG needs a tag key", permanent=True)
        elif kind != "DIMENSION" or key not in ALLOWED_DIMENSIONS:
            raise SourceError(
                f"group_by {kind}:{key} is not supported (DIMENSION "
                f"{', '.join(sorted(ALLOWED_DIMENSIONS))} or TAG)",
                permanent=True,
            )
        out.append({"Type": kind, "Key": key})
    if len(out) > 2:
        raise SourceError(
            f"group_by has {len(out)} keys; Cost Explorer allows at most 2",
            permanent=True,
        )
    return out


class CostExplorerSource:
    """GetCostAndUsage for some linked accounts over a window."""

    name = NAME

    def __init__(
        self,
        *,
        account_ids: Sequence[str],
        granularity: str = "DAILY",
        group_by: Sequence[Mapping[str, str]] = (
            {"Type": "DIMENSION", "Key": "USAGE_TYPE"},
        ),
        filter: Mapping[str, Any] | None = None,
        metrics: Sequence[str] = DEFAULT_METRICS,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        now: datetime | None = None,
        client: Any = None,
    ) -> None:
        if not account_ids:
            raise SourceError(
                "no account to query (account_ids is empty)", permanent=True
            )
        for account in account_ids:
            # ASCII digits only: str.isdigit() also accepts full-width ones.
            if not (isinstance(account, str) and ACCOUNT_ID.fullmatch(account)):
                raise SourceError(
                    f"account_ids: {account!r} is not a 12-digit AWS account id",
                    permanent=True,
                )
        if granularity not in {"DAILY", "HOURLY"}:
            raise SourceError(
                f"granularity {granularity!r}: use DAILY or HOURLY", permanent=True
            )
        unknown = [m for m in metrics if m not in METRIC_FIELDS]
        if unknown:
            raise SourceError(f"metrics: unknown {unknown}", permanent=True)
        self.account_ids = list(account_ids)
        self.granularity = granularity
        groups = _validate_group_by(group_by)
        if any(g["Key"] == "RECORD_TYPE" for g in groups):
            self.families: list[tuple[str, tuple[str, ...]]] = [("", ())]
        elif len(groups) < 2:
            # A free GroupBy slot: group by RECORD_TYPE, one query does all.
            groups.append({"Type": "DIMENSION", "Key": "RECORD_TYPE"})
            self.families = [("", ())]
        else:
            self.families = [*FAMILIES, OTHER_FAMILY]
        self.group_by = groups
        self.filter = dict(filter) if filter else None
        self.metrics = list(metrics)
        self.max_attempts = max_attempts
        self.now = now
        self._client = client

    # -- planning -----------------------------------------------------------

    def _check_window(self, window: Window) -> None:
        if self.granularity != "HOURLY":
            return
        now = self.now or datetime.now(UTC)
        earliest = day_start(now) - timedelta(days=HOURLY_DAYS)
        if window.start < earliest:
            raise SourceError(
                f"HOURLY granularity covers only the trailing {HOURLY_DAYS} days: "
                f"window start {window.start:%Y-%m-%d %H:%M} is before "
                f"{earliest:%Y-%m-%d %H:%M} UTC",
                permanent=True,
            )

    def _filter(self, account_id: str, family: tuple[str, ...], name: str) -> dict:
        parts: list[dict[str, Any]] = [
            {"Dimensions": {"Key": "LINKED_ACCOUNT", "Values": [account_id]}}
        ]
        if name == "other":
            known = [k for _, values in FAMILIES for k in values]
            parts.append(
                {"Not": {"Dimensions": {"Key": "RECORD_TYPE", "Values": known}}}
            )
        elif family:
            parts.append({"Dimensions": {"Key": "RECORD_TYPE", "Values": list(family)}})
        if self.filter:
            parts.append(self.filter)
        return parts[0] if len(parts) == 1 else {"And": parts}

    def queries(self, window: Window) -> list[Query]:
        self._check_window(window)
        out = []
        for account in self.account_ids:
            for chunk in month_chunks(window):
                for family_name, family in self.families:
                    request = {
                        "TimePeriod": {
                            "Start": _time(chunk.start, self.granularity),
                            "End": _time(chunk.end, self.granularity),
                        },
                        "Granularity": self.granularity,
                        "Metrics": self.metrics,
                        "GroupBy": self.group_by,
                        "Filter": self._filter(account, family, family_name),
                    }
                    out.append(Query(account, chunk, family_name, request))
        return out

    def plan(self, window: Window) -> int:
        """Requests planned (each $0.01), before any pagination."""
        return len(self.queries(window))

    # -- fetching -----------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            # lazy: boto3 and botocore cost 160 ms and 8 MiB that only a Cost
            # Explorer run needs; no other path of the web or worker imports them.
            import boto3
            from botocore.config import Config

            self._client = boto3.client(
                "ce",
                config=Config(
                    retries={"mode": "standard", "max_attempts": self.max_attempts}
                ),
            )
        return self._client

    def _pages(self, query: Query) -> Iterator[dict[str, Any]]:
        from botocore.exceptions import BotoCoreError, ClientError  # lazy: as boto3

        token: str | None = None
        while True:
            kwargs = dict(query.request)
            if token:
                kwargs["NextPageToken"] = token
            try:
                page: dict[str, Any] = self.client.get_cost_and_usage(**kwargs)
            except ClientError as exc:
                raise _client_error(exc, query) from exc
            except BotoCoreError as exc:
                raise SourceError(f"Cost Explorer unreachable: {exc}") from exc
            yield page
            token = page.get("NextPageToken")
            if not token:
                return

    def _collect(
        self, account: str, queries: list[Query]
    ) -> tuple[list[CostRecord], int]:
        """All pages of all queries of one account-window, or a restart."""
        requests = 0
        last: SourceError | None = None
        for attempt in range(MAX_RESTARTS + 1):
            records: list[CostRecord] = []
            try:
                for query in queries:
                    family = next(
                        (v for n, v in self.families if n == query.record_family), ()
                    )
                    record_type = family[0] if family else None
                    if query.record_family == "other":
                        record_type = "Other"
                    for page in self._pages(query):
                        requests += 1
                        records.extend(
                            records_from_response(
                                page,
                                account_id=account,
                                group_by=self.group_by,
                                record_type=record_type,
                            )
                        )
            except _RequestChanged as exc:
                requests += 1  # the failed page was a request too
                logger.info(
                    "Cost Explorer data changed under account %s window %s "
                    "(attempt %d): restarting the window",
                    account,
                    queries[0].window.start,
                    attempt + 1,
                )
                last = exc
                continue
            except SourceError as exc:
                # Pages already fetched (and the refused one, which AWS also
                # answered) were charged: they travel with the error.
                made = requests + (1 if isinstance(exc, _Refused) else 0)
                raise CostExplorerError(
                    str(exc), permanent=exc.permanent, api_requests=made
                ) from exc
            return records, requests
        raise CostExplorerError(
            f"Cost Explorer data kept changing for account {account} from "
            f"{queries[0].window.start:%Y-%m-%d} ({MAX_RESTARTS + 1} tries): {last}",
            api_requests=requests,
        )

    def fetch(self, window: Window) -> Iterator[Batch]:
        planned = self.queries(window)
        groups: dict[tuple[str, datetime], list[Query]] = {}
        for query in planned:
            groups.setdefault((query.account_id, query.window.start), []).append(query)
        granularity = "hour" if self.granularity == "HOURLY" else "day"
        for (account, _), queries in groups.items():
            records, requests = self._collect(account, queries)
            chunk = queries[0].window
            yield Batch(
                records=list(_merge(records)),
                replace=ReplaceScope(
                    source=NAME,
                    account_id=account,
                    start=chunk.start,
                    end=chunk.end,
                    granularity=granularity,
                ),
                steps=len(queries),
                api_requests=requests,
            )


class _RequestChanged(SourceError):
    pass


class _Refused(SourceError):
    """AWS answered the request with an error: it was made (and counted)."""


def _client_error(exc: Any, query: Query) -> SourceError:
    error = exc.response.get("Error", {})
    code = error.get("Code", "ClientError")
    message = error.get("Message", str(exc))
    where = f"account {query.account_id} {query.request['TimePeriod']}"
    if code == "RequestChangedException":
        return _RequestChanged(f"{code}: {message}")
    permanent = code not in {"LimitExceededException", "ThrottlingException"}
    return _Refused(f"Cost Explorer {code} ({where}): {message}", permanent=permanent)


def _merge(records: Iterable[CostRecord]) -> Iterator[CostRecord]:
    """One record per natural key.

    Grouping by USAGE_TYPE with RECORD_TYPE mapped onto fewer record types
    (Fee and a purchase's fee are both "fee", a savings plan's recurring and
    upfront fees both "fee" of a savings plan) can give two groups with the
    same key: their amounts add up, since they are parts of one line.
    """
    merged: dict[tuple[Any, ...], CostRecord] = {}
    for r in records:
        key = (
            r.account_id,
            r.granularity,
            r.period_start,
            r.service,
            r.usage_type,
            r.record_type,
            r.commitment,
            r.resource_id,
            r.tag_key,
            r.tag_value,
            r.currency,
        )
        old = merged.get(key)
        if old is None:
            merged[key] = r
            continue
        values: dict[str, Any] = {}
        for field in METRIC_FIELDS.values():
            a, b = getattr(old, field), getattr(r, field)
            values[field] = b if a is None else a if b is None else a + b
        merged[key] = CostRecord(
            **{**old.__dict__, **values, "estimated": old.estimated or r.estimated}
        )
    yield from merged.values()
