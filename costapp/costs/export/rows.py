"""One row of the finance export and its columns: the schema both files
share, the slotted row the export builds, its values in column order.

Money is ``Decimal`` quantized to 12 places; a unit cost with no traffic
under it is missing, never infinite (``costapp.costs.export.build`` builds the
rows, ``costapp.costs.export.files`` writes them).
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from operator import attrgetter
from typing import Any

import pyarrow as pa

QUANTUM = Decimal("1e-12")
PROVISIONAL, ESTIMATED, FINAL = "provisional", "estimated", "final"

MONEY = pa.decimal128(28, 12)
# (column, Parquet type). Money is decimal128(28, 12) (float64 loses cents
# above about $1M at ten decimals); counts are float64 as telemetry holds them.
SCHEMA_FIELDS: list[tuple[str, pa.DataType]] = [
    ("period_start", pa.date32()),
    ("period_days", pa.int32()),
    ("account_id", pa.string()),
    ("currency", pa.string()),
    ("basis", pa.string()),
    ("target", pa.string()),
    ("pool", pa.string()),
    ("allocation", pa.string()),
    ("status", pa.string()),
    ("days_final", pa.int32()),
    ("days_estimated", pa.int32()),
    ("days_provisional", pa.int32()),
    ("bill_amount", MONEY),
    ("provisional_cost", MONEY),
    ("requests", pa.float64()),
    ("prompt_tokens", pa.float64()),
    ("generation_tokens", pa.float64()),
    ("gpu_hours", pa.float64()),
    ("nominal_gpu_hours", pa.int32()),
    ("cost_per_1k_requests", MONEY),
    ("cost_per_1m_tokens", MONEY),
    ("cost_per_gpu_hour", MONEY),
]


class ExportRow:
    """One export row being built (a plain slotted class: a year makes tens
    of thousands, and a dataclass's default factories cost more than the
    row's own arithmetic).

    Days are counted per status, not held as sets: a row is made once per
    key and day and a month's rows of one key are merged, so its days never
    repeat and a count is all the columns need."""

    __slots__ = (
        "account",
        "bill",
        "currency",
        "days_estimated",
        "days_final",
        "days_provisional",
        "generation",
        "gpu_hours",
        "hows",
        "nominal",
        "period",
        "pool",
        "prompt",
        "provisional",
        "requests",
        "target",
    )  # fmt: skip

    def __init__(
        self,
        period: date,
        account: str,
        currency: str,
        target: str,
        pool: str,
        status: str,
    ) -> None:
        self.period = period
        self.account = account
        self.currency = currency
        self.target = target
        self.pool = pool
        self.hows: set[str] = set()
        self.bill: Decimal | None = None
        self.provisional: Decimal | None = None
        self.days_final = 1 if status == FINAL else 0
        self.days_estimated = 1 if status == ESTIMATED else 0
        self.days_provisional = 1 if status == PROVISIONAL else 0
        self.requests: float | None = None
        self.prompt: float | None = None
        self.generation: float | None = None
        self.gpu_hours: float | None = None
        self.nominal = 0

    def add_bill(self, amount: Decimal) -> None:
        self.bill = amount if self.bill is None else self.bill + amount

    def add_provisional(self, amount: Decimal) -> None:
        self.provisional = (
            amount if self.provisional is None else self.provisional + amount
        )

    def add_traffic(
        self,
        gpu_hours: Decimal | None,
        requests: Decimal | None,
        nominal: int,
        prompt: float,
        generation: float,
    ) -> None:
        """One deployment's day (``reads.UsageRow``); GPU-hours and
        requests are ``None`` when only its tokens are known."""
        if gpu_hours is not None and requests is not None:
            n, hours = float(requests), float(gpu_hours)
            self.requests = n if self.requests is None else self.requests + n
            self.gpu_hours = hours if self.gpu_hours is None else self.gpu_hours + hours
            self.nominal += nominal
        self.prompt = prompt if self.prompt is None else self.prompt + prompt
        self.generation = (
            generation if self.generation is None else self.generation + generation
        )

    @classmethod
    def from_stored(cls, stored: tuple[Any, ...]) -> ExportRow:
        """The row of one day back from its stored form (``STORED_COLUMNS``)."""
        (day, account, currency, target, pool, allocation, status, bill,
         provisional, requests, prompt, generation, gpu_hours, nominal,
         *_) = stored  # fmt: skip
        row = cls(day, account, currency, target, pool, status)
        row.hows = set(allocation.split(HOWS_SEPARATOR)) if allocation else set()
        row.bill, row.provisional = bill, provisional
        row.requests, row.prompt, row.generation = requests, prompt, generation
        row.gpu_hours, row.nominal = gpu_hours, nominal
        return row

    def merge(self, other: ExportRow) -> None:
        """Add ``other``, a later day of the same key, into this row."""
        self.hows |= other.hows
        if other.bill is not None:
            self.add_bill(other.bill)
        if other.provisional is not None:
            self.add_provisional(other.provisional)
        self.days_final += other.days_final
        self.days_estimated += other.days_estimated
        self.days_provisional += other.days_provisional
        for name in ("requests", "prompt", "generation", "gpu_hours"):
            value = getattr(other, name)
            if value is not None:
                old = getattr(self, name)
                setattr(self, name, value if old is None else old + value)
        self.nominal += other.nominal


def money_text(value: Decimal | None) -> str:
    """A money cell as the one CSV writer writes it, ``format(value, "f")``.

    ``str`` gives the same text whenever it has no exponent (a quantized
    amount of a millionth or more) in about half the time; a year has about
    five money cells per row. tests/costs/test_export_text.py checks the two.
    It is also PostgreSQL's text of the amount as ``numeric(28, 12)``, which
    is how the CSV reads stored rows (``reads.stored_export_rows_read``)."""
    if value is None:
        return ""
    text = str(value)
    return format(value, "f") if "E" in text else text


def money_as_text(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """The row (``SCHEMA_FIELDS`` order) with its money cells (bill,
    provisional cost, the three unit costs) as ``money_text``."""
    bill, provisional, *traffic = values[12:19]
    per_1k, per_1m, per_gpu_hour = values[19:]
    return (
        *values[:12], money_text(bill), money_text(provisional), *traffic,
        money_text(per_1k), money_text(per_1m), money_text(per_gpu_hour),
    )  # fmt: skip


HOWS_SEPARATOR = "; "
# Rows within a period: by account, currency, target, pool.
ROW_ORDER = attrgetter("account", "currency", "target", "pool")

# A day's row as ``CostExportRow`` stores it and the export reads it back:
# ``row_values`` of a day less the columns a day's row fixes (period days,
# basis, the day counts its status gives).
STORED_COLUMNS = (
    "day", "account_id", "currency", "target", "pool", "allocation", "status",
    "bill_amount", "provisional_cost", "requests", "prompt_tokens",
    "generation_tokens", "gpu_hours", "nominal_gpu_hours",
    "cost_per_1k_requests", "cost_per_1m_tokens", "cost_per_gpu_hour",
)  # fmt: skip
_DAY_COUNTS = {FINAL: (1, 0, 0), ESTIMATED: (0, 1, 0), PROVISIONAL: (0, 0, 1)}


def stored_of(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """A day's ``row_values`` in ``STORED_COLUMNS`` order."""
    return values[:1] + values[2:4] + values[5:9] + values[12:]


def stored_values(stored: tuple[Any, ...], basis: str) -> tuple[Any, ...]:
    """A stored day's row back in ``SCHEMA_FIELDS`` order (``stored_of``
    undone): what ``row_values`` gives for the row it was stored from."""
    return (
        stored[:1] + (1,) + stored[1:3] + (basis,) + stored[3:7]
        + _DAY_COUNTS[stored[6]] + stored[7:]
    )  # fmt: skip


def _unsigned(value: Decimal | None) -> Decimal | None:
    # A refund's unit cost that rounds to zero is 0, as PostgreSQL stores it,
    # not -0: a stored row and a computed one read the same.
    return value if value is None or value else abs(value)


GPU_HOURS_PLACES = 6


def row_values(row: ExportRow, basis: str, period_days: int) -> tuple[Any, ...]:
    """The row in ``SCHEMA_FIELDS`` order; unit costs are the cost over the
    traffic at 12 places (inlined: this runs once per row of a year)."""
    bill, provisional = row.bill, row.provisional
    cost = bill
    if provisional is not None:
        cost = provisional if cost is None else cost + provisional
    requests, gpu_hours = row.requests, row.gpu_hours
    if gpu_hours is not None:
        # To the microhour (3.6 ms), as measured: a sum of days' floats
        # otherwise reads 1274.5714280000002 in the CSV.
        gpu_hours = round(gpu_hours, GPU_HOURS_PLACES)
    prompt, generation = row.prompt, row.generation
    tokens = None if prompt is None or generation is None else prompt + generation
    # Never divide by zero requests: no traffic is no unit cost, not infinity.
    per_1k = per_1m = per_gpu_hour = None
    if cost is not None:
        if requests:
            per_1k = (cost * 1000 / Decimal(repr(requests))).quantize(QUANTUM)
        if tokens:
            per_1m = (cost * 1_000_000 / Decimal(repr(tokens))).quantize(QUANTUM)
        if gpu_hours:
            per_gpu_hour = (cost / Decimal(repr(gpu_hours))).quantize(QUANTUM)
        if cost.is_signed():
            per_1k, per_1m = _unsigned(per_1k), _unsigned(per_1m)
            per_gpu_hour = _unsigned(per_gpu_hour)
    estimated, prov = row.days_estimated, row.days_provisional
    return (
        row.period,
        period_days,
        row.account,
        row.currency,
        basis,
        row.target,
        row.pool,
        HOWS_SEPARATOR.join(sorted(row.hows)),
        PROVISIONAL if prov else ESTIMATED if estimated else FINAL,
        row.days_final,
        estimated,
        prov,
        None if bill is None else bill.quantize(QUANTUM),
        None if provisional is None else provisional.quantize(QUANTUM),
        requests,
        prompt,
        generation,
        gpu_hours,
        row.nominal,
        per_1k,
        per_1m,
        per_gpu_hour,
    )
