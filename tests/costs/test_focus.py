"""FOCUS imports: the real sample rows and files built from the spec's columns,
CSV and Parquet, local and S3 (moto server on loopback), malformed rows."""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from costapp.costs.services import billing_periods_claim, focus_import_execute
from costapp.ingest import ingest_run_create
from costapp.models import BillingPeriodSource, CostLine, IngestRun
from costapp.sources.base import Window
from tests.costs.conftest import cost_lines, utc

pytestmark = [pytest.mark.django_db, pytest.mark.integration, pytest.mark.smoke]
FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE = FIXTURES / "focus_1.0_sample_aws_first50.csv"
SPEC = FIXTURES / "focus_columns_v1.0_v1.1_v1.2.csv"
DECIMALS = (
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "ConsumedQuantity",
    "PricingQuantity",
    "ListUnitPrice",
    "ContractedUnitPrice",
)
D = Decimal


def sample_rows() -> list[dict[str, str]]:
    with SAMPLE.open(newline="") as f:
        return list(csv.DictReader(f))


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_parquet(path: Path, rows: list[dict[str, str]]) -> Path:
    """Typed like a real export: decimals as decimal128, times as timestamps."""
    from datetime import datetime

    columns: dict[str, pa.Array] = {}
    for name in rows[0]:
        values = [None if r[name] == "NULL" else r[name] for r in rows]
        if name in DECIMALS:
            columns[name] = pa.array(
                [None if v is None else D(v) for v in values], pa.decimal128(38, 15)
            )
        elif name.endswith(("PeriodStart", "PeriodEnd")):
            columns[name] = pa.array(
                [None if v is None else datetime.fromisoformat(v) for v in values],
                pa.timestamp("us", tz="UTC"),
            )
        else:
            columns[name] = pa.array(values, pa.string())
    pq.write_table(pa.table(columns), path, row_group_size=16)
    return path


def import_file(uri: str, **kwargs: object) -> IngestRun:
    run = ingest_run_create(
        source="focus",
        window=Window(utc(2024, 9, 1), utc(2024, 10, 1)),
        target=uri,
        params={"uri": uri, "tag_keys": ["application"]},
    )
    # As the focus_import command does: an operator may name a local path.
    return focus_import_execute(run=run, trusted=True, **kwargs)  # type: ignore[arg-type]


def totals_by_account(field: str) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for account, value in CostLine.objects.values_list("account_id", field):
        out[account] = out.get(account, D(0)) + value
    return out


def expected_totals(rows: list[dict[str, str]], column: str) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for r in rows:
        account = (
            r["SubAccountId"] if r["SubAccountId"] != "NULL" else r["BillingAccountId"]
        )
        out[account] = out.get(account, D(0)) + D(r[column])
    return out


def test_the_real_sample_rows_import_to_the_cent_and_reimport_identically() -> None:
    rows = sample_rows()
    run = import_file(str(SAMPLE))
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert totals_by_account("billed_cost") == expected_totals(rows, "BilledCost")
    assert totals_by_account("unblended_cost") == expected_totals(rows, "BilledCost")
    assert totals_by_account("amortized_cost") == expected_totals(rows, "EffectiveCost")
    assert totals_by_account("list_cost") == expected_totals(rows, "ListCost")
    # Hourly charge periods roll up to the UTC day.
    assert set(CostLine.objects.values_list("granularity", flat=True)) == {"day"}
    tagged = CostLine.objects.filter(tag_key="application")
    assert tagged.exists()
    assert all(line.tag_value for line in tagged)
    assert not CostLine.objects.filter(region="NULL").exists()
    first = cost_lines()
    again = import_file(str(SAMPLE))
    assert again.status == IngestRun.SUCCEEDED
    assert cost_lines() == first
    assert set(BillingPeriodSource.objects.values_list("source", flat=True)) == {
        "focus"
    }


def test_parquet_and_small_chunks_give_the_same_bill_as_csv(tmp_path: Path) -> None:
    rows = sample_rows()
    import_file(str(SAMPLE))
    from_csv = cost_lines()
    CostLine.objects.all().delete()
    run = import_file(
        str(write_parquet(tmp_path / "sample.parquet", rows)), chunk_rows=7
    )
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert cost_lines() == from_csv
    CostLine.objects.all().delete()
    import_file(str(SAMPLE), chunk_rows=3)
    assert cost_lines() == from_csv


def spec_rows(version: str) -> list[dict[str, str]]:
    """Two rows of every column the spec version lists, typed by the spec."""
    with SPEC.open(newline="") as f:
        columns = [r for r in csv.DictReader(f) if r["focus_version"] == version]
    rows = []
    for i, (category, cost) in enumerate(
        [("Usage", "12.345678901234"), ("Credit", "-2.5")]
    ):
        row = {}
        for c in columns:
            name, kind = c["column_id"], c["data_type"]
            if kind == "Decimal":
                row[name] = cost
            elif kind == "Date/Time":
                row[name] = {
                    "BillingPeriodStart": "2025-01-01T00:00:00Z",
                    "BillingPeriodEnd": "2025-02-01T00:00:00Z",
                    "ChargePeriodStart": f"2025-01-0{i + 1}T00:00:00Z",
                    "ChargePeriodEnd": f"2025-01-0{i + 2}T00:00:00Z",
                }.get(name, "2025-01-01T00:00:00Z")
            elif kind == "JSON":
                row[name] = '{"application": "chat"}' if name == "Tags" else "{}"
            else:
                row[name] = {
                    "BillingAccountId": "999988887777",
                    "SubAccountId": "123456789012",
                    "BillingCurrency": "EUR",
                    "ChargeCategory": category,
                    "ServiceName": "Virtual Machines",
                    "RegionId": "westeurope",
                }.get(name, "NULL" if c["allows_nulls"] == "True" else "x")
        rows.append(row)
    return rows


@pytest.mark.parametrize("version", ["v1.0", "v1.1", "v1.2"])
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_files_with_every_spec_column_of_each_version_import(
    tmp_path: Path, version: str, fmt: str
) -> None:
    rows = spec_rows(version)
    path = tmp_path / f"focus-{version}.{fmt}"
    if fmt == "csv":
        write_csv(path, rows)
    else:
        write_parquet(path, rows)
    run = import_file(str(path))
    assert run.status == IngestRun.SUCCEEDED, run.error
    lines = sorted(
        CostLine.objects.values_list(
            "period_start",
            "record_type",
            "currency",
            "effective_cost",
            "tag_value",
            "account_id",
        )
    )
    assert lines == [
        (utc(2025, 1, 1), "usage", "EUR", D("12.345678901234"), "chat", "123456789012"),
        (utc(2025, 1, 2), "credit", "EUR", D("-2.5"), "chat", "123456789012"),
    ]


def test_a_malformed_row_names_file_row_column_and_value_and_writes_nothing(
    tmp_path: Path,
) -> None:
    rows = sample_rows()
    import_file(str(SAMPLE))
    before = cost_lines()
    rows[36]["BilledCost"] = "12,5"
    bad = write_csv(tmp_path / "bad.csv", rows)
    run = import_file(str(bad))
    assert run.status == IngestRun.FAILED
    assert "bad.csv row 37, column BilledCost: '12,5' is not a decimal" in run.error
    assert cost_lines() == before  # the earlier import is untouched

    rows = sample_rows()
    rows[49]["ChargeCategory"] = "Usagee"
    run = import_file(str(write_parquet(tmp_path / "bad.parquet", rows)))
    assert "bad.parquet row 50, column ChargeCategory: 'Usagee'" in run.error
    assert cost_lines() == before


def test_a_file_that_is_not_focus_is_refused_with_the_missing_columns(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cur.csv"
    path.write_text("line_item_usage_type,line_item_unblended_cost\nBoxUsage,1\n")
    run = import_file(str(path))
    assert run.status == IngestRun.FAILED
    assert "missing column(s) BilledCost" in run.error


def test_a_reimport_replaces_the_period_so_a_vanished_row_vanishes(
    tmp_path: Path,
) -> None:
    rows = sample_rows()
    import_file(str(SAMPLE))
    busy = max(
        expected_totals(rows, "BilledCost"),
        key=lambda a: sum(r["SubAccountId"] == a for r in rows),
    )
    dropped = next(r for r in rows if r["SubAccountId"] == busy)
    rest = [r for r in rows if r is not dropped]
    count_before = CostLine.objects.filter(account_id=busy).count()
    import_file(str(write_csv(tmp_path / "restated.csv", rest)))
    assert totals_by_account("billed_cost") == expected_totals(rest, "BilledCost")
    assert CostLine.objects.filter(account_id=busy).count() == count_before - 1


def test_a_period_owned_by_cost_explorer_is_refused_with_the_reason() -> None:
    rows = sample_rows()
    account = rows[5]["SubAccountId"]
    from datetime import date

    billing_periods_claim(
        account_id=account, months=[date(2024, 9, 1)], source="cost_explorer"
    )
    run = import_file(str(SAMPLE))
    assert run.status == IngestRun.FAILED
    assert (
        f"account {account} 2024-09 already comes from AWS Cost Explorer" in run.error
    )
    assert "claimed" in run.error
    assert CostLine.objects.count() == 0
    assert BillingPeriodSource.objects.filter(source="focus").count() == 0


def test_csv_and_parquet_import_from_s3(s3: object, tmp_path: Path) -> None:
    rows = sample_rows()
    s3.upload_file(str(SAMPLE), "exports", "focus/2024-09/part-0.csv")  # type: ignore[attr-defined]
    buf = io.BytesIO()
    write_parquet(tmp_path / "p.parquet", rows)
    buf.write((tmp_path / "p.parquet").read_bytes())
    s3.put_object(
        Bucket="exports",
        Key="focus/2024-09/part-0.parquet",  # type: ignore[attr-defined]
        Body=buf.getvalue(),
    )
    run = import_file("s3://exports/focus/2024-09/part-0.csv")
    assert run.status == IngestRun.SUCCEEDED, run.error
    from_csv = cost_lines()
    assert totals_by_account("billed_cost") == expected_totals(rows, "BilledCost")
    CostLine.objects.all().delete()
    run = import_file("s3://exports/focus/2024-09/part-0.parquet")
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert cost_lines() == from_csv
    run = import_file("s3://exports/focus/missing.csv")
    assert run.status == IngestRun.FAILED
    assert "s3://exports/focus/missing.csv: cannot read from S3" in run.error
