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

import bz2
import gzip
import io
import logging
import os
import re
import tempfile
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd

from analytics.errors import InvalidInput, shown
from costapp.days import day_start
from costapp.sources.base import Batch, CostRecord, ReplaceScope, Window
from costapp.sources.focus_commitments import COLUMNS as COMMITMENT_COLUMNS
from costapp.sources.focus_commitments import commitment_of
from costapp.sources.focus_csv import CappedReader, FocusError
from costapp.sources.focus_parquet import ParquetRefused, parquet_rows
from costapp.validation import (
    MAX_MAGNITUDE,
    bound,
    datetime_in,
    decimal_in,
    flat_object_in,
    text_in,
)

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
    "PricingQuantity",  # checked, not stored
    "ChargeClass",  # "Correction": may take back usage (negative quantities)
    "x_UsageType",  # AWS Data Exports' provider column; FOCUS has no usage type
    *COMMITMENT_COLUMNS,
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
# Account ids are the provider's (AWS 12 digits, but the FOCUS sample's own
# sub-accounts have 11; Azure and GCP use other shapes): printable ASCII
# without spaces, as long as the column holds. Full-width digits and NUL
# bytes are refused.
ACCOUNT = re.compile(r"[!-~]{1,32}")
DEFAULT_MAX_BYTES = 1 << 30
DEFAULT_MAX_INFLATION = 100
# Below this many decompressed bytes the inflation ratio is not checked: a
# tiny file compresses badly or very well without meaning anything.
INFLATION_FLOOR = 16 << 20


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
    # Per column, the sum of |amount| over the period's rows: below 10^15,
    # so no line or total of this account's month can exceed it.
    magnitude: list[Decimal] = field(default_factory=lambda: [Decimal(0)] * 4)


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
        display_name: str | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_inflation: int = DEFAULT_MAX_INFLATION,
    ) -> None:
        self.uri = uri
        self.tag_keys = list(tag_keys)
        self.chunk_rows = chunk_rows
        self._s3 = s3_client
        self._periods: dict[tuple[str, datetime], Period] | None = None
        self.display_name = (display_name or uri.rsplit("/", 1)[-1])[:200]
        self.max_bytes = max_bytes
        self.max_inflation = max_inflation

    # -- reading ------------------------------------------------------------

    def _local_path(self) -> tuple[Path, bool]:
        """(path, is_temporary): an s3:// object is streamed to a temp file
        (to disk, not memory) so both readers can seek and chunk it."""
        if not self.uri.startswith("s3://"):
            path = Path(self.uri)
            try:
                found = path.is_file()
            except OSError as exc:  # a 300-character name, a NUL byte
                raise FocusError(f"FOCUS file {shown(self.uri)}: {exc}") from None
            if not found:
                raise FocusError(f"FOCUS file {shown(self.uri)}: no such file")
            return path, False
        bucket, _, key = self.uri[5:].partition("/")
        if not bucket or not key:
            raise FocusError(f"{self.uri}: expected s3://bucket/key")
        # lazy: boto3 and botocore cost 160 ms and 8 MiB that only an s3:// URI
        # needs; no other path of the web or worker process imports them.
        from botocore.exceptions import BotoCoreError, ClientError

        client = self._s3
        if client is None:
            import boto3  # lazy: as botocore above

            client = boto3.client("s3")
        suffix = "".join(Path(key).suffixes[-2:])
        too_big = (
            f"{self.uri}: more than the {self.max_bytes:,} bytes allowed "
            "(COSTAPP_FOCUS_MAX_DECOMPRESSED_BYTES)"
        )
        fd, name = tempfile.mkstemp(prefix="focus-", suffix=suffix[-16:])
        try:
            with os.fdopen(fd, "wb") as out:
                answer = client.get_object(Bucket=bucket, Key=key)
                if int(answer.get("ContentLength") or 0) > self.max_bytes:
                    raise FocusError(too_big)
                # The bytes received are counted: the declared length is
                # only a hint, and the object may change after it was sent.
                received = 0
                with closing(answer["Body"]) as body:
                    for chunk in body.iter_chunks(1024 * 1024):
                        received += len(chunk)
                        if received > self.max_bytes:
                            raise FocusError(too_big)
                        out.write(chunk)
        except (ClientError, BotoCoreError) as exc:
            os.unlink(name)
            raise FocusError(f"{self.uri}: cannot read from S3: {exc}") from exc
        except BaseException:
            os.unlink(name)
            raise
        return Path(name), True

    def _limit(self, path: Path) -> int:
        """Decompressed bytes allowed for the file at ``path``."""
        by_ratio = max(INFLATION_FLOOR, path.stat().st_size * self.max_inflation)
        return min(self.max_bytes, by_ratio)

    def _open_text(self, path: Path) -> io.BufferedReader:
        """The CSV's bytes, decompressed as they are read, capped."""
        name = path.name.lower()
        raw: Any
        if name.endswith(".gz"):
            raw = gzip.open(path, "rb")
        elif name.endswith(".bz2"):
            raw = bz2.open(path, "rb")
        elif name.endswith(".zip"):
            try:
                archive = zipfile.ZipFile(path)
                members = [i for i in archive.infolist() if not i.is_dir()]
            except (zipfile.BadZipFile, OSError) as exc:
                raise FocusError(f"{self.display_name}: not a zip file: {exc}") from exc
            if len(members) != 1:
                raise FocusError(
                    f"{self.display_name}: a zip must hold exactly one CSV, "
                    f"not {len(members)} files"
                )
            raw = archive.open(members[0])
        else:
            raw = path.open("rb")
        return io.BufferedReader(
            CappedReader(raw, limit=self._limit(path), name=self.display_name)
        )

    def _rows(self, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
        """(1-based data row number, row) in chunks."""
        wanted = set(REQUIRED) | set(OPTIONAL)
        name = path.name.lower()
        if name.endswith(".parquet") or name.endswith(".parq"):
            try:
                yield from parquet_rows(
                    path,
                    wanted=wanted,
                    limit=self._limit(path),
                    batch_rows=self.chunk_rows,
                    check_header=self._check_header,
                )
            except ParquetRefused as exc:
                raise FocusError(
                    f"{self.display_name}: {exc}; nothing was imported"
                ) from None
            return
        handle = self._open_text(path)
        try:
            reader = pd.read_csv(
                handle,
                compression=None,
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
                handle.close()
                handle = self._open_text(path)
                header = pd.read_csv(handle, compression=None, nrows=0).columns
                self._check_header(list(header))
        except FocusError:
            raise
        except (
            pd.errors.ParserError,
            pd.errors.EmptyDataError,
            UnicodeDecodeError,
            ValueError,
            OSError,
            EOFError,
        ) as exc:
            raise FocusError(f"{self.display_name}: not a readable CSV: {exc}") from exc
        finally:
            handle.close()

    def _check_header(self, columns: Sequence[str]) -> None:
        absent = [c for c in REQUIRED if c not in columns]
        if absent:
            raise FocusError(
                f"{self.display_name}: not a FOCUS 1.0-1.2 export, missing "
                f"column(s) {', '.join(absent)}"
            )

    def _error(self, row: int, column: str, value: Any, why: str) -> FocusError:
        return FocusError(
            f"{self.display_name} row {row}, column {column}: {shown(value)} {why}; "
            "nothing was imported"
        )

    def _fold(self, n: int, row: Mapping[str, Any], periods: dict) -> None:
        for column, value in row.items():
            if isinstance(value, str) and ("\x00" in value or "\ue000" in value):
                raise self._error(
                    n, column, value.replace("\ue000", "\x00"), "contains a NUL byte"
                )

        def text(column: str, max_length: int = 1000) -> str:
            value = _cell(row, column)
            if value is None:
                return ""
            try:
                return text_in(str(value), field=column, max_length=max_length).strip()
            except InvalidInput as exc:
                raise self._error(n, column, value, exc.reason) from None

        def decimal(
            column: str, required: bool = True, negative: bool = True
        ) -> Decimal | None:
            value = _cell(row, column)
            if value is None:
                if required:
                    raise self._error(n, column, row.get(column), "is required")
                return None
            try:
                return decimal_in(value, field=column, negative=negative)
            except InvalidInput as exc:
                raise self._error(n, column, value, exc.reason) from None

        def time(column: str) -> datetime:
            value = _cell(row, column)
            if value is None:
                raise self._error(n, column, row.get(column), "is required")
            try:
                return datetime_in(value, field=column)
            except InvalidInput as exc:
                raise self._error(n, column, value, exc.reason) from None

        sub_account, billing_account = text("SubAccountId"), text("BillingAccountId")
        account = sub_account or billing_account
        column = "SubAccountId" if sub_account else "BillingAccountId"
        if not account:
            raise self._error(
                n, "BillingAccountId", row.get("BillingAccountId"), "is required"
            )
        if not ACCOUNT.fullmatch(account):
            raise self._error(
                n,
                column,
                row.get(column),
                "is not an account id (ASCII letters, digits and punctuation, "
                "at most 32)",
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
        # Quantities count on usage rows only (FOCUS: null on the others),
        # and there they are never negative (GPU-hours price the fleet), but
        # on a correction (ChargeClass "Correction"), which may take back usage
        # billed in an earlier period.
        usage = category == "Usage"
        correction = _cell(row, "ChargeClass") == "Correction"
        signed = not usage or correction
        quantity = decimal("ConsumedQuantity", required=False, negative=signed)
        decimal("PricingQuantity", required=False, negative=signed)
        quantity = quantity if usage else None
        service = text("ServiceName")
        if not service:
            raise self._error(n, "ServiceName", row.get("ServiceName"), "is required")
        tag_key = tag_value = ""
        raw_tags = _cell(row, "Tags")
        if raw_tags is not None:
            # FOCUS Tags are a flat key-value object; anything nested is refused.
            try:
                tags = flat_object_in(raw_tags, field="Tags")
            except InvalidInput as exc:
                raise self._error(n, "Tags", raw_tags, exc.reason) from None
            for key in self.tag_keys:
                if key in tags:
                    tag_key, tag_value = key, str(tags[key])
                    break

        # A charge outside its billing period (late corrections) is dated to
        # the nearest day inside it, so replacing the period replaces it too.
        day = day_start(charge_start)
        first_day = day_start(period_start)
        last_day = day_start(period_end - timedelta(microseconds=1))
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
        assert billed is not None and effective is not None and listed is not None
        sums = period.magnitude
        sums[0] += abs(billed)
        sums[1] += abs(effective)
        sums[2] += abs(listed)
        sums[3] += quantity or 0  # never negative where it counts
        if max(sums) >= MAX_MAGNITUDE:
            i = next(i for i, total in enumerate(sums) if total >= MAX_MAGNITUDE)
            column = ("BilledCost", "EffectiveCost", "ListCost", "ConsumedQuantity")[i]
            raise self._error(
                n,
                column,
                row.get(column),
                f"brings the sum of |{column}| over account {account}'s billing "
                f"period from {period_start:%Y-%m-%d} to {sums[i]:f}; amounts "
                f"stay below {bound(MAX_MAGNITUDE)}",
            )
        try:
            commitment, record_type = commitment_of(text, CHARGE_CATEGORIES[category])
        except InvalidInput as exc:
            raise self._error(n, exc.field, exc.value, exc.reason) from None
        usage_type = text("x_UsageType")
        resource = text("ResourceId")[:500]
        line_key = (
            day,
            service,
            usage_type,
            record_type,
            commitment,
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
                    "commitment": commitment,
                    "resource_id": resource,
                    "tag_key": tag_key[:128],
                    "tag_value": tag_value[:256],
                    "currency": currency,
                }
            )
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
