"""FOCUS 1.0-1.2 exports (CSV or Parquet, local or s3://) as a source.

FOCUS rows have no line key, so an import replaces each (account, billing
period) it contains as one unit: one batch with a ``ReplaceScope`` over the
period. The file is read in chunks (pandas ``chunksize``, pyarrow
``iter_batches``) and folded into daily lines as it streams, so an export
larger than memory imports: memory holds the distinct daily lines, not the
rows. The whole file is read and checked before the first batch is yielded,
so a malformed row anywhere writes nothing.

Grain: hourly charge periods roll up to the UTC day of ChargePeriodStart.
Cost Explorer (the other source) is daily, allocation and the dashboards are
daily, and keeping the hour would multiply stored lines by 24 for no view that
uses them. The column mapping is documented in docs/costs.md.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from costapp.sources.base import Batch, CostRecord, ReplaceScope, SourceError, Window

logger = logging.getLogger(__name__)

NAME = "focus"
CHUNK_ROWS = 50_000
REQUIRED = (
    "BilledCost",
    "BillingAccountId",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargeCategory",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "EffectiveCost",
    "ListCost",
    "ServiceName",
)
OPTIONAL = (
    "SubAccountId",
    "ResourceId",
    "Tags",
    "RegionId",
    "Region",  # FOCUS 0.5 name of RegionId
    "ConsumedQuantity",
    "ConsumedUnit",
    "x_UsageType",  # AWS Data Exports' provider column; FOCUS has no usage type
)
CHARGE_CATEGORIES = {
    "Usage": "usage",
    "Purchase": "fee",
    "Tax": "tax",
    "Credit": "credit",
    # Adjustments are refunds, corrections and rounding: not usage, not a
    # credit by name; they stay their own kind and are allocated by the same
    # rules as any other line.
    "Adjustment": "other",
}
NULLS = {"", "NULL", "null"}


@dataclass
class _Line:
    fields: dict[str, Any]
    billed: Decimal = Decimal(0)
    effective: Decimal = Decimal(0)
    listed: Decimal = Decimal(0)
    quantity: Decimal | None = Decimal(0)
    unit: str | None = None
    region: str | None = None


@dataclass
class Period:
    account_id: str
    start: datetime
    end: datetime
    rows: int = 0
    lines: dict[tuple[Any, ...], _Line] = field(default_factory=dict)


class FocusError(SourceError):
    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=True)


def _parse_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        dt = value
    else:
        text = str(value).strip().replace("Z", "+00:00")
        dt = datetime.fromisoformat(text)
    # FOCUS date/times are UTC; a naive value is read as UTC.
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _parse_decimal(value: Any) -> Decimal:
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, float):
        result = Decimal(repr(value))
    else:
        result = Decimal(str(value).strip())
    if not result.is_finite():
        raise InvalidOperation(value)
    return result


def _cell(row: Mapping[str, Any], column: str) -> Any:
    value = row.get(column)
    if value is None:
        return None
    if isinstance(value, str) and value.strip() in NULLS:
        return None
    return value


class FocusSource:
    name = NAME

    def __init__(
        self,
        *,
        uri: str,
        tag_keys: Sequence[str] = (),
        chunk_rows: int = CHUNK_ROWS,
        s3_client: Any = None,
    ) -> None:
        self.uri = uri
        self.tag_keys = list(tag_keys)
        self.chunk_rows = chunk_rows
        self._s3 = s3_client
        self._periods: dict[tuple[str, datetime], Period] | None = None
        self.display_name = uri.rsplit("/", 1)[-1]

    # -- reading ------------------------------------------------------------

    def _local_path(self) -> tuple[Path, bool]:
        """(path, is_temporary): an s3:// object is streamed to a temp file
        (to disk, not memory) so both readers can seek and chunk it."""
        if not self.uri.startswith("s3://"):
            path = Path(self.uri)
            if not path.is_file():
                raise FocusError(f"FOCUS file {self.uri}: no such file")
            return path, False
        bucket, _, key = self.uri[5:].partition("/")
        if not bucket or not key:
            raise FocusError(f"{self.uri}: expected s3://bucket/key")
        from botocore.exceptions import BotoCoreError, ClientError

        client = self._s3
        if client is None:
            import boto3

            client = boto3.client("s3")
        suffix = "".join(Path(key).suffixes[-2:])
        fd, name = tempfile.mkstemp(prefix="focus-", suffix=suffix)
        try:
            with os.fdopen(fd, "wb") as out:
                client.download_fileobj(bucket, key, out)
        except (ClientError, BotoCoreError) as exc:
            os.unlink(name)
            raise FocusError(f"{self.uri}: cannot read from S3: {exc}") from exc
        return Path(name), True

    def _rows(self, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
        """(1-based data row number, row) in chunks."""
        wanted = set(REQUIRED) | set(OPTIONAL)
        name = path.name.lower()
        if name.endswith(".parquet") or name.endswith(".parq"):
            import pyarrow.parquet as pq

            try:
                parquet = pq.ParquetFile(path)
            except Exception as exc:  # pyarrow raises several types; report any
                raise FocusError(
                    f"{self.display_name}: not a Parquet file: {exc}"
                ) from exc
            columns = [c for c in parquet.schema_arrow.names if c in wanted]
            self._check_header(parquet.schema_arrow.names)
            n = 0
            for batch in parquet.iter_batches(
                batch_size=self.chunk_rows, columns=columns
            ):
                for row in batch.to_pylist():
                    n += 1
                    yield n, row
            return
        import pandas as pd

        try:
            reader = pd.read_csv(
                path,
                chunksize=self.chunk_rows,
                dtype=str,
                keep_default_na=False,
                na_filter=False,
                usecols=lambda c: c in wanted,
            )
            n = 0
            first = True
            for chunk in reader:
                if first:
                    self._check_header(list(chunk.columns))
                    first = False
                for row in chunk.to_dict("records"):
                    n += 1
                    yield n, row
            if first:  # empty file with a header only
                header = pd.read_csv(path, nrows=0).columns
                self._check_header(list(header))
        except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
            if isinstance(exc, FocusError):
                raise
            raise FocusError(f"{self.display_name}: not a readable CSV: {exc}") from exc

    def _check_header(self, columns: Sequence[str]) -> None:
        absent = [c for c in REQUIRED if c not in columns]
        if absent:
            raise FocusError(
                f"{self.display_name}: not a FOCUS 1.0-1.2 export, missing "
                f"column(s) {', '.join(absent)}"
            )

    def _error(self, row: int, column: str, value: Any, why: str) -> FocusError:
        return FocusError(
            f"{self.display_name} row {row}, column {column}: {value!r} {why}; "
            "nothing was imported"
        )

    def _fold(self, n: int, row: Mapping[str, Any], periods: dict) -> None:
        def text(column: str) -> str:
            value = _cell(row, column)
            return "" if value is None else str(value).strip()

        def decimal(column: str, required: bool = True) -> Decimal | None:
            value = _cell(row, column)
            if value is None:
                if required:
                    raise self._error(n, column, row.get(column), "is required")
                return None
            try:
                return _parse_decimal(value)
            except (InvalidOperation, ValueError):
                raise self._error(n, column, value, "is not a decimal") from None

        def time(column: str) -> datetime:
            value = _cell(row, column)
            if value is None:
                raise self._error(n, column, row.get(column), "is required")
            try:
                return _parse_time(value)
            except ValueError:
                raise self._error(n, column, value, "is not a date/time") from None

        account = text("SubAccountId") or text("BillingAccountId")
        if not account:
            raise self._error(
                n, "BillingAccountId", row.get("BillingAccountId"), "is required"
            )
        currency = text("BillingCurrency")
        if len(currency) != 3 or not currency.isalpha() or not currency.isupper():
            raise self._error(
                n,
                "BillingCurrency",
                row.get("BillingCurrency"),
                "is not an ISO 4217 currency code",
            )
        category = text("ChargeCategory")
        if category not in CHARGE_CATEGORIES:
            raise self._error(
                n,
                "ChargeCategory",
                row.get("ChargeCategory"),
                f"is not one of {', '.join(CHARGE_CATEGORIES)}",
            )
        period_start, period_end = time("BillingPeriodStart"), time("BillingPeriodEnd")
        if period_end <= period_start:
            raise self._error(
                n,
                "BillingPeriodEnd",
                row.get("BillingPeriodEnd"),
                "is not after BillingPeriodStart",
            )
        charge_start, charge_end = time("ChargePeriodStart"), time("ChargePeriodEnd")
        if charge_end < charge_start:
            raise self._error(
                n,
                "ChargePeriodEnd",
                row.get("ChargePeriodEnd"),
                "is before ChargePeriodStart",
            )
        billed = decimal("BilledCost")
        effective = decimal("EffectiveCost")
        listed = decimal("ListCost")
        quantity = decimal("ConsumedQuantity", required=False)
        service = text("ServiceName")
        if not service:
            raise self._error(n, "ServiceName", row.get("ServiceName"), "is required")
        tag_key = tag_value = ""
        raw_tags = _cell(row, "Tags")
        if raw_tags is not None:
            try:
                tags = json.loads(raw_tags) if isinstance(raw_tags, str) else raw_tags
            except json.JSONDecodeError:
                raise self._error(n, "Tags", raw_tags, "is not JSON") from None
            if not isinstance(tags, dict):
                raise self._error(n, "Tags", raw_tags, "is not a JSON object")
            for key in self.tag_keys:
                if key in tags:
                    tag_key, tag_value = key, str(tags[key])
                    break

        # A charge outside its billing period (late corrections) is dated to
        # the nearest day inside it, so replacing the period replaces it too.
        day = charge_start.replace(hour=0, minute=0, second=0, microsecond=0)
        first_day = period_start.replace(hour=0, minute=0, second=0, microsecond=0)
        last_day = (period_end - timedelta(microseconds=1)).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        day = min(max(day, first_day), last_day)

        period = periods.get((account, period_start))
        if period is None:
            period = periods[(account, period_start)] = Period(
                account, period_start, period_end
            )
        elif period.end != period_end:
            raise self._error(
                n,
                "BillingPeriodEnd",
                row.get("BillingPeriodEnd"),
                f"differs from {period.end:%Y-%m-%d %H:%M} in earlier rows",
            )
        period.rows += 1
        record_type = CHARGE_CATEGORIES[category]
        usage_type = text("x_UsageType")
        resource = text("ResourceId")[:500]
        line_key = (
            day,
            service,
            usage_type,
            record_type,
            resource,
            tag_key,
            tag_value,
            currency,
        )
        line = period.lines.get(line_key)
        if line is None:
            line = period.lines[line_key] = _Line(
                fields={
                    "account_id": account,
                    "period_start": day,
                    "service": service[:200],
                    "usage_type": usage_type[:200],
                    "record_type": record_type,
                    "resource_id": resource,
                    "tag_key": tag_key[:128],
                    "tag_value": tag_value[:256],
                    "currency": currency,
                }
            )
        assert billed is not None and effective is not None and listed is not None
        line.billed += billed
        line.effective += effective
        line.listed += listed
        unit = text("ConsumedUnit")
        if quantity is not None and line.quantity is not None:
            if line.unit is None or line.unit == unit:
                line.quantity += quantity
                line.unit = unit
            else:  # two units under one key cannot be added
                line.quantity, line.unit = None, "mixed"
        region = text("RegionId") or text("Region")
        line.region = region if line.region in (None, region) else ""

    def scan(self) -> dict[tuple[str, datetime], Period]:
        """Read and check the whole file; the periods it holds, folded."""
        if self._periods is not None:
            return self._periods
        path, temporary = self._local_path()
        periods: dict[tuple[str, datetime], Period] = {}
        try:
            for n, row in self._rows(path):
                self._fold(n, row, periods)
        finally:
            if temporary:
                path.unlink(missing_ok=True)
        self._periods = periods
        return periods

    # -- the protocol -------------------------------------------------------

    def plan(self, window: Window) -> int:
        return len(self.scan())

    def fetch(self, window: Window) -> Iterator[Batch]:
        """One batch per (account, billing period), whatever ``window`` says:
        the file decides which periods it replaces."""
        for period in self.scan().values():
            yield period_batch(period)


def period_batch(period: Period) -> Batch:
    records = [
        CostRecord(
            **line.fields,
            granularity="day",
            region=line.region or "",
            billed_cost=line.billed,
            unblended_cost=line.billed,
            effective_cost=line.effective,
            amortized_cost=line.effective,
            list_cost=line.listed,
            usage_quantity=line.quantity,
            usage_unit=(line.unit or "")[:32],
        )
        for line in period.lines.values()
    ]
    return Batch(
        records=records,  # type: ignore[arg-type]
        replace=ReplaceScope(
            source=NAME,
            account_id=period.account_id,
            start=period.start,
            end=period.end,
            granularity="day",
        ),
        steps=1,
    )
