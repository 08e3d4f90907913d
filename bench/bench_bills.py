"""Bill ingest speed against PostgreSQL's own COPY of the same rows.

One year of daily lines for 50 deployments x 20 usage types (365,000 lines)
goes through the real ingest path (``costapp.ingest.batch_write``: one batch
per account-month, each replacing its month, as the Cost Explorer source
yields them), then the same rows are COPYed into a scratch table shaped like
costapp_costline (same columns, constraints and indexes) in the same run. The
result is a ratio of rates (goal: ingest >= 0.3 x COPY), median of 3.

Not run by CI. Needs DATABASE_URL pointing at a migrated PostgreSQL database;
it writes under account 000000000000 and deletes those rows afterwards.

    DATABASE_URL=postgres://costapp:costapp@127.0.0.1:5432/costapp \\
        .venv/bin/python bench/bench_bills.py [--smoke] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costapp.settings")

import django

django.setup()

from django.db import connection  # noqa: E402

from costapp.ingest import batch_write  # noqa: E402
from costapp.models import CostLine  # noqa: E402
from costapp.sources.base import Batch, CostRecord, ReplaceScope  # noqa: E402

ACCOUNT = "000000000000"
COLUMNS = [
    "source",
    "account_id",
    "granularity",
    "period_start",
    "service",
    "usage_type",
    "record_type",
    "resource_id",
    "tag_key",
    "tag_value",
    "region",
    "currency",
    "unblended_cost",
    "amortized_cost",
    "net_amortized_cost",
    "usage_quantity",
    "usage_unit",
    "estimated",
    "fetched_at",
]


def records(days: int, deployments: int, usage_types: int) -> list[CostRecord]:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    out = []
    for d in range(days):
        day = start + timedelta(days=d)
        for i in range(deployments):
            for j in range(usage_types):
                amount = Decimal(
                    f"{(d * 7 + i * 13 + j) % 997}.{(i * j + d) % 10**10:010d}"
                )
                out.append(
                    CostRecord(
                        account_id=ACCOUNT,
                        period_start=day,
                        service="Amazon Elastic Compute Cloud - Compute",
                        usage_type=f"USE1-UsageType-{j:02d}",
                        tag_key="costapp:deployment",
                        tag_value=f"deployment-{i:02d}",
                        region="us-east-1",
                        unblended_cost=amount,
                        amortized_cost=amount,
                        net_amortized_cost=amount,
                        usage_quantity=Decimal(24),
                        usage_unit="Hrs",
                    )
                )
    return out


def month_batches(recs: list[CostRecord]) -> list[Batch]:
    by_month: dict[tuple[int, int], list[CostRecord]] = {}
    for r in recs:
        by_month.setdefault((r.period_start.year, r.period_start.month), []).append(r)
    batches = []
    for (y, m), month in sorted(by_month.items()):
        start = datetime(y, m, 1, tzinfo=UTC)
        end = (start + timedelta(days=32)).replace(day=1)
        batches.append(Batch(month, ReplaceScope("cost_explorer", ACCOUNT, start, end)))
    return batches


def cleanup() -> None:
    CostLine.objects.filter(account_id=ACCOUNT).delete()


def time_ingest(batches: list[Batch]) -> float:
    cleanup()
    t0 = time.perf_counter()
    for batch in batches:
        batch_write(batch=batch, source="cost_explorer")
    return time.perf_counter() - t0


def time_copy(recs: list[CostRecord]) -> float:
    """The floor: only PostgreSQL's COPY of the rows, already in COPY text
    format (formatting is done before the clock starts), into a table with
    costapp_costline's columns, constraints and indexes."""
    from costapp.pgcopy import copy_text

    now = datetime.now(UTC)
    text = "".join(
        "\t".join(
            copy_text(v)
            for v in (
                "cost_explorer",
                r.account_id,
                r.granularity,
                r.period_start,
                r.service,
                r.usage_type,
                r.record_type,
                r.resource_id,
                r.tag_key,
                r.tag_value,
                r.region,
                r.currency,
                r.unblended_cost,
                r.amortized_cost,
                r.net_amortized_cost,
                r.usage_quantity,
                r.usage_unit,
                r.estimated,
                now,
            )
        )
        + "\n"
        for r in recs
    ).encode()
    with connection.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS bench_costline_copy")
        cur.execute(
            "CREATE TABLE bench_costline_copy (LIKE costapp_costline INCLUDING ALL)"
        )
        raw = cur.cursor
        t0 = time.perf_counter()
        with raw.copy(
            f"COPY bench_costline_copy ({', '.join(COLUMNS)}) FROM STDIN"
        ) as copy:
            for i in range(0, len(text), 1 << 20):
                copy.write(text[i : i + (1 << 20)])
        elapsed = time.perf_counter() - t0
        cur.execute("DROP TABLE bench_costline_copy")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="a tiny run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--days", type=int, default=365)
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("bench_bills needs PostgreSQL (DATABASE_URL=postgres://...)")
    days, deps, types = (10, 5, 4) if args.smoke else (args.days, 50, 20)
    recs = records(days, deps, types)
    batches = month_batches(recs)
    ingest, copy, reingest = [], [], []
    for _ in range(args.repeat):
        copy.append(time_copy(recs))
        ingest.append(time_ingest(batches))
        # A rerun over a full table: every month replaced in place.
        t0 = time.perf_counter()
        for batch in batches:
            batch_write(batch=batch, source="cost_explorer")
        reingest.append(time.perf_counter() - t0)
    cleanup()
    n = len(recs)
    med_i, med_c, med_r = (statistics.median(x) for x in (ingest, copy, reingest))
    with connection.cursor() as cur:
        cur.execute("SHOW server_version")
        (version,) = cur.fetchone()
    print(
        f"lines: {n:,} in {len(batches)} account-month batches; repeats: {args.repeat}"
    )
    print(
        f"PostgreSQL {version}; Python {platform.python_version()}; "
        f"{platform.machine()} {os.cpu_count()} CPUs"
    )
    print(f"COPY (floor):     {med_c:7.2f} s  {n / med_c:10,.0f} lines/s")
    print(
        f"ingest (first):   {med_i:7.2f} s  {n / med_i:10,.0f} lines/s  "
        f"ratio to COPY {med_c / med_i:.2f}"
    )
    print(
        f"ingest (rerun):   {med_r:7.2f} s  {n / med_r:10,.0f} lines/s  "
        f"ratio to COPY {med_c / med_r:.2f}"
    )
    print(
        "all runs (ingest, rerun, copy):",
        [
            f"{a:.2f}/{b:.2f}/{c:.2f}"
            for a, b, c in zip(ingest, reingest, copy, strict=True)
        ],
    )


if __name__ == "__main__":
    main()
