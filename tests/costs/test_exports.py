"""Finance exports on PostgreSQL: the CSV and the Parquet of a month sum to the
stored bill exactly, missing and estimated days are declared, text is
formula-safe while numbers stay numbers, and memory does not grow with the
window."""

from __future__ import annotations

import csv
import io
import itertools
import zipfile
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Sum
from django.test import Client
from hypothesis import given
from hypothesis import strategies as st

from analytics.errors import shown
from costapp.costs.export.build import Export, ExportSpec, day_ranges
from costapp.costs.export.files import csv_rows, parquet_write, summary_csv
from costapp.models import CostLine, Deployment, DeploymentHour, Pool, RateCard
from tests.costs.conftest import ACCOUNT, utc
from tests.support.users import user_in

pytestmark = pytest.mark.django_db
D = Decimal
EVIL_TEAM = '=HYPERLINK("http://x")'
NOV = date(2026, 11, 1)
DEC = date(2026, 12, 1)


def needs_postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite keeps 15 significant digits; exactness needs PostgreSQL")


def seed_month(start: date = NOV, days: int = 30, billed_days: int = 29) -> None:
    """A pool of two deployments and a tagged one; bills for the first
    ``billed_days`` days (the last two of them estimated), telemetry for all."""
    pool = Pool.objects.create(
        name="p5-pool",
        instance_type="p5.48xlarge",
        gpu_type="H100-80GB",
        gpus_per_node=8,
        cost_rules=[{"usage_type": "BoxUsage:p5.48xlarge"}],
    )
    chat = Deployment.objects.create(
        name="chat",
        team="assistant",
        model_name="m",
        gpu_type="H100-80GB",
        pool=pool,
        instance_type="p5.48xlarge",
        account_id=ACCOUNT,
    )
    code = Deployment.objects.create(
        name="code",
        team=EVIL_TEAM,
        model_name="m",
        gpu_type="H100-80GB",
        pool=pool,
        instance_type="p5.48xlarge",
        account_id=ACCOUNT,
    )
    embed = Deployment.objects.create(
        name="embed",
        team="search",
        model_name="e",
        gpu_type="L4",
        instance_type="g6.xlarge",
        account_id=ACCOUNT,
        cost_rules=[{"tag": {"key": "team", "value": "embed"}}],
    )
    RateCard.objects.create(
        gpu_type="H100-80GB",
        instance_type="p5.48xlarge",
        price=D("55.04"),
        gpus_per_unit=8,
        effective_from=date(2025, 1, 1),
        source="test",
    )
    RateCard.objects.create(
        gpu_type="L4",
        instance_type="g6.xlarge",
        price=D("0.8048"),
        effective_from=date(2025, 1, 1),
        source="test",
    )
    hours, lines = [], []
    for i in range(days):
        day = start + timedelta(days=i)
        for h in range(24):
            at = utc(day.year, day.month, day.day, h)
            for dep, gpu_s, req in ((chat, 5 * 3600, 31), (code, 2 * 3600, 7)):
                hours.append(
                    DeploymentHour(
                        deployment=dep,
                        hour=at,
                        gpu_seconds=gpu_s,
                        requests_stop=req,
                        prompt_tokens=req * 700,
                        generation_tokens=req * 130,
                    )
                )
            hours.append(
                DeploymentHour(
                    deployment=embed, hour=at, gpu_seconds=3600, requests_stop=3
                )
            )
        if i >= billed_days:
            continue
        at = utc(day.year, day.month, day.day)
        base = {
            "source": "cost_explorer",
            "account_id": ACCOUNT,
            "period_start": at,
            "fetched_at": at + timedelta(days=2),
            "estimated": i >= billed_days - 2,
        }
        # Ten-decimal amounts, as Cost Explorer sends them.
        for usage_type, amount, extra in (
            ("BoxUsage:p5.48xlarge", D("1320.9600000001") + i, {"usage_quantity": 24}),
            ("BoxUsage:g6.xlarge", D("19.3152000003"), {"tag_key": "team"}),
            ("Tax", D("5.5000000007"), {"record_type": "tax"}),
            ("Refund", D("-12.50"), {"record_type": "refund"}),
        ):
            kw = dict(base, usage_type=usage_type, amortized_cost=amount, **extra)
            if usage_type == "BoxUsage:p5.48xlarge":
                kw["usage_unit"] = "Hrs"
            if usage_type == "BoxUsage:g6.xlarge":
                kw["tag_value"] = "embed"
            kw["unblended_cost"] = amount + D("0.000000000001")
            lines.append(CostLine(service="EC2", **kw))
    DeploymentHour.objects.bulk_create(hours, batch_size=5000)
    CostLine.objects.bulk_create(lines, batch_size=5000)


def stored_total(start: date, end: date, field: str = "amortized_cost") -> Decimal:
    """The bill as stored, summed by SQL (not through the export's code)."""
    total = CostLine.objects.filter(
        period_start__gte=utc(start.year, start.month, start.day),
        period_start__lt=utc(end.year, end.month, end.day),
    ).aggregate(t=Sum(field))["t"]
    return total or D(0)


def csv_of(export: Export) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO("".join(csv_rows(export)))))


def summary_of(export: Export) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO("".join(summary_csv(export)))))


def test_the_november_csv_covers_30_days_and_declares_the_missing_and_estimated() -> (
    None
):
    needs_postgres()
    seed_month()
    export = Export(ExportSpec(start=NOV, end=DEC))
    rows = csv_of(export)
    assert (
        export.stem
        == "costapp-2026-11-01-to-2026-11-30-day-deployment-amortized-incomplete"
    )
    assert {r["period_start"] for r in rows} == {
        str(NOV + timedelta(days=i)) for i in range(30)
    }
    exported = sum(D(r["bill_amount"]) for r in rows if r["bill_amount"])
    assert exported == stored_total(NOV, DEC)  # exact at stored precision
    last = [r for r in rows if r["period_start"] == "2026-11-30"]
    assert {r["status"] for r in last} == {"provisional"}
    assert all(r["bill_amount"] == "" for r in last)
    # The rate card's figure, in its own column: 5 GPU-hours x 24 x $6.88.
    chat = next(r for r in last if r["deployment"] == "chat")
    assert D(chat["provisional_cost"]) == D("825.600000000000")
    estimated = {r["period_start"] for r in rows if r["status"] == "estimated"}
    assert estimated == {"2026-11-28", "2026-11-29"}
    targets = {r["deployment"] for r in rows}
    assert {"__idle__", "__unallocated__", "chat", "code", "embed"} <= targets
    # Money is fixed-point with twelve places: never an exponent.
    money = [r[c] for r in rows for c in ("bill_amount", "provisional_cost") if r[c]]
    assert all("E" not in m and len(m.split(".")[1]) == 12 for m in money)
    (summary,) = summary_of(export)
    assert summary["days_in_window"] == "30"
    assert summary["days_billed"] == "29" and summary["days_missing"] == "1"
    assert summary["missing_days"] == "2026-11-30"
    assert summary["estimated_days"] == "2026-11-28..2026-11-29"
    assert D(summary["bill_total_stored"]) == stored_total(NOV, DEC)
    assert D(summary["bill_total_exported"]) == exported
    assert D(summary["difference"]) == 0
    provisional = sum(D(r["provisional_cost"]) for r in rows if r["provisional_cost"])
    assert D(summary["provisional_cost_total"]) == provisional > 0


def test_the_parquet_month_is_decimal128_and_sums_to_the_bill_in_each_basis(
    tmp_path: Path,
) -> None:
    needs_postgres()
    seed_month()
    for basis, column in (
        ("amortized", "amortized_cost"),
        ("unblended", "unblended_cost"),
    ):
        for grain in ("day", "month"):
            export = Export(
                ExportSpec(
                    start=NOV, end=DEC, grain=grain, basis=basis, format="parquet"
                )
            )
            path = tmp_path / f"{basis}-{grain}.parquet"
            with path.open("wb") as out:
                parquet_write(export, out)
            table = pq.read_table(path)
            for name in ("bill_amount", "provisional_cost", "cost_per_1k_requests"):
                assert table.schema.field(name).type == pa.decimal128(28, 12)
            bills = [
                v for v in table.column("bill_amount").to_pylist() if v is not None
            ]
            assert sum(bills, D(0)) == stored_total(NOV, DEC, column)
            (summary,) = summary_of(export)
            assert D(summary["bill_total_exported"]) == sum(bills, D(0))
            if grain == "month":
                assert set(table.column("period_start").to_pylist()) == {NOV}
                chat = table.filter(pa.compute.equal(table["deployment"], "chat"))
                assert chat.column("days_provisional").to_pylist() == [1]
                assert chat.column("days_estimated").to_pylist() == [2]
                assert chat.column("status").to_pylist() == ["provisional"]


def test_a_formula_in_a_team_is_neutralised_and_a_refund_stays_a_number() -> None:
    needs_postgres()
    seed_month(days=1, billed_days=1)
    export = Export(ExportSpec(start=NOV, end=NOV + timedelta(days=1), by="team"))
    text = "".join(csv_rows(export))
    rows = list(csv.DictReader(io.StringIO(text)))
    teams = {r["team"] for r in rows}
    assert "'" + EVIL_TEAM in teams and EVIL_TEAM not in teams
    unallocated = next(r for r in rows if r["team"] == "__unallocated__")
    # Tax 5.5000000007 and the -12.50 refund: a bare number, not text.
    assert unallocated["bill_amount"] == "-6.999999999300"
    assert "\n" + ACCOUNT not in text  # rows begin with the period, not an account


def test_the_web_zip_holds_the_data_and_its_summary_and_needs_the_right(
    client: Client,
) -> None:
    needs_postgres()
    seed_month(days=3, billed_days=3)
    query = {"month": "2026-11", "format": "parquet", "grain": "month"}
    client.force_login(user_in("lead-x", "tech lead"))
    assert client.get("/costs/export.zip", query).status_code == 200
    client.force_login(user_in("fin", "finance"))
    response = client.get("/costs/export.zip", query)
    assert response.status_code == 200
    stem = "costapp-2026-11-01-to-2026-11-30-month-deployment-amortized-incomplete"
    # The ZIP's name says its format: a CSV and a Parquet ZIP of one month
    # are two files in a finance folder, not one overwriting the other.
    assert response["Content-Disposition"] == (
        f'attachment; filename="{stem}-parquet.zip"'
    )
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    assert archive.namelist() == [f"{stem}.parquet", f"{stem}-summary.csv"]
    # Dated when written, not zipfile's 1980-01-01.
    assert {i.date_time[0] for i in archive.infolist()} == {datetime.now(UTC).year}
    table = pq.read_table(io.BytesIO(archive.read(f"{stem}.parquet")))
    bills = [v for v in table.column("bill_amount").to_pylist() if v is not None]
    assert sum(bills, D(0)) == stored_total(NOV, DEC)
    summary = list(
        csv.DictReader(io.StringIO(archive.read(f"{stem}-summary.csv").decode()))
    )
    assert summary[0]["days_missing"] == "27"
    bad = client.get("/costs/export.zip", {"month": "2026-13"})
    assert bad.status_code == 400
    assert b"month='2026-13'" in bad.content
    recon = client.get(
        "/costs/reconciliation.csv", {"start": "2026-11-01", "end": "2026-11-05"}
    )
    body = b"".join(recon.streaming_content).decode()
    assert (
        "\r\n2026-11-03,chat,amortized,billed,120.000000,6.880000000000,825.600000000000,"
        in body
    )


def test_the_command_writes_the_data_and_the_summary_as_two_files(
    tmp_path: Path,
) -> None:
    needs_postgres()
    seed_month(days=2, billed_days=2)
    out = tmp_path / "nov.csv"
    call_command(
        "costs_export",
        "--start",
        "2026-11-01",
        "--end",
        "2026-11-03",
        "--grain",
        "day",
        "--format",
        "csv",
        "--out",
        str(out),
        stdout=io.StringIO(),
    )
    rows = list(csv.DictReader(out.open()))
    summary = list(csv.DictReader((tmp_path / "nov-summary.csv").open()))
    assert sum(D(r["bill_amount"]) for r in rows) == stored_total(
        NOV, date(2026, 11, 3)
    )
    assert summary[0]["days_missing"] == "0"


def test_the_command_refuses_a_missing_folder_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "no-such-folder" / "nov.csv"
    with pytest.raises(CommandError) as refused:
        call_command("costs_export", "--month", "2026-11", "--out", str(out))
    assert str(refused.value) == (
        f"out={shown(str(out))}: the folder {out.parent} does not exist"
    )


def test_a_failed_export_leaves_the_earlier_files_and_no_partial_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduled job reads the file by name: it never sees half of one."""
    seed_month(days=2, billed_days=2)
    out = tmp_path / "nov.csv"
    out.write_text("the earlier export\n")

    def summary_fails(export: Export) -> Any:
        raise RuntimeError("disk full")

    monkeypatch.setattr("costapp.costs.export.write.summary_csv", summary_fails)
    args = ["--start", "2026-11-01", "--end", "2026-11-03", "--out", str(out)]
    with pytest.raises(RuntimeError, match="disk full"):
        call_command("costs_export", *args, stdout=io.StringIO())
    assert out.read_text() == "the earlier export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nov.csv"]
    monkeypatch.undo()
    call_command("costs_export", *args, stdout=io.StringIO())
    assert out.read_text().startswith("period_start,")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nov-summary.csv", "nov.csv"]


def peak_bytes(spec: ExportSpec) -> tuple[int, Export]:
    """Peak Python allocation while writing the export to nowhere."""
    import tracemalloc

    tracemalloc.start()
    try:
        export = Export(spec)
        if spec.format == "parquet":
            parquet_write(export, _Null())  # type: ignore[arg-type]
        else:
            for _ in csv_rows(export):
                pass
        summary = list(summary_csv(export))
        assert summary
        return tracemalloc.get_traced_memory()[1], export
    finally:
        tracemalloc.stop()


class _Null:
    def write(self, data: bytes) -> int:
        return len(data)


def seed_fleet(start: date, days: int, deployments: int = 10) -> None:
    """A fleet big enough that holding a year of rows would show: each
    deployment has four resource-level lines a day and hourly telemetry."""
    RateCard.objects.create(
        gpu_type="L40S",
        price=D("1.861"),
        effective_from=date(2025, 1, 1),
        source="test",
    )
    fleet = [
        Deployment.objects.create(
            name=f"dep-{n:02d}",
            team=f"team-{n % 3}",
            model_name="m",
            gpu_type="L40S",
            cost_rules=[{"resource_id": f"i-{n:02d}"}],
        )
        for n in range(deployments)
    ]
    hours, lines = [], []
    for i in range(days):
        day = start + timedelta(days=i)
        at = utc(day.year, day.month, day.day)
        for n, dep in enumerate(fleet):
            hours.extend(
                DeploymentHour(
                    deployment=dep,
                    hour=at + timedelta(hours=h),
                    gpu_seconds=3600,
                    requests_stop=40 + n,
                    prompt_tokens=9000,
                    generation_tokens=2000,
                )
                for h in range(24)
            )
            for usage_type in ("BoxUsage", "EBS:VolumeUsage", "DataTransfer", "Credit"):
                lines.append(
                    CostLine(
                        source="cost_explorer",
                        account_id=ACCOUNT,
                        period_start=at,
                        fetched_at=at,
                        service="EC2",
                        usage_type=usage_type,
                        resource_id=f"i-{n:02d}",
                        amortized_cost=D("44.6640000001") + n,
                    )
                )
            lines.append(
                CostLine(
                    source="cost_explorer",
                    account_id=ACCOUNT,
                    period_start=at,
                    fetched_at=at,
                    service="S3",
                    usage_type=f"Requests-{n}",
                    amortized_cost=D("0.0000000003"),
                )
            )
    DeploymentHour.objects.bulk_create(hours, batch_size=10_000)
    CostLine.objects.bulk_create(lines, batch_size=10_000)


def test_a_year_exports_in_about_the_memory_of_a_month() -> None:
    needs_postgres()
    start = date(2025, 12, 1)
    seed_fleet(start, days=365, deployments=12)
    end = start + timedelta(days=365)
    for fmt in ("csv", "parquet"):
        month, _ = peak_bytes(
            ExportSpec(start=start, end=start + timedelta(days=31), format=fmt)
        )
        year, export = peak_bytes(ExportSpec(start=start, end=end, format=fmt))
        print("PEAK", fmt, month, year)
        assert year - month < 20 * 2**20, (fmt, month, year)
        (summary,) = summary_of_totals(export)
        assert summary[8] == 365 and summary[16] == 0  # days billed, difference
    # What the flat figure is worth: the year's bill lines held at once (as
    # the export before this one did) would not be.
    held = peak_bytes_of_lines(start, end)
    print("HELD", held)
    assert held > 20 * 2**20
    assert export.totals.exported[(ACCOUNT, "USD")] == stored_total(start, end)


def summary_of_totals(export: Export) -> list[list[object]]:
    return list(export.summary_rows())


def peak_bytes_of_lines(start: date, end: date) -> int:
    import tracemalloc

    from costapp.costs.selectors import cost_lines_read

    tracemalloc.start()
    try:
        lines = list(cost_lines_read(start, end))
        assert lines
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def expand(ranges: str) -> set[date]:
    out: set[date] = set()
    for part in ranges.split():
        first, _, last = part.partition("..")
        a = date.fromisoformat(first)
        b = date.fromisoformat(last or first)
        assert a <= b
        out |= {a + timedelta(days=i) for i in range((b - a).days + 1)}
    return out


@given(st.sets(st.dates(min_value=date(2025, 1, 1), max_value=date(2026, 12, 31))))
def test_the_summary_day_ranges_name_exactly_the_days_given(days: set[date]) -> None:
    text = day_ranges(sorted(days))
    assert expand(text) == days
    # Ranges are maximal: two never touch, so the text is as short as it can be.
    parts = [p.partition("..") for p in text.split()]
    for (s1, _, e1), (s2, _, _) in itertools.pairwise(parts):
        assert date.fromisoformat(s2) - date.fromisoformat(e1 or s1) > timedelta(1)


def test_a_deployment_with_traffic_but_no_share_of_a_billed_day_shows_zero() -> None:
    needs_postgres()
    seed_month(days=1, billed_days=1)
    orphan = Deployment.objects.create(
        name="orphan", model_name="m", gpu_type="L4", account_id=ACCOUNT
    )
    DeploymentHour.objects.create(
        deployment=orphan, hour=utc(2026, 11, 1, 3), gpu_seconds=3600, requests_stop=9
    )
    rows = csv_of(Export(ExportSpec(start=NOV, end=NOV + timedelta(days=1))))
    (row,) = [r for r in rows if r["deployment"] == "orphan"]
    assert (row["bill_amount"], row["allocation"], row["status"]) == (
        "0.000000000000",
        "no share",
        "estimated",  # the seed's last two billed days are estimated
    )
    assert row["requests"] == "9.0"
    assert row["cost_per_1k_requests"] == "0.000000000000"


def test_a_formula_in_a_tag_value_is_neutralised_and_minus_12_50_stays_a_number(
    client: Client,
) -> None:
    needs_postgres()
    for value, amount in (
        ('=HYPERLINK("http://x")', D("3.25")),
        ("-12.50", D("-12.50")),
    ):
        CostLine.objects.create(
            source="focus",
            account_id=ACCOUNT,
            period_start=utc(2026, 11, 2),
            service="EC2",
            usage_type=f"u{amount}",
            tag_key="team",
            tag_value=value,
            amortized_cost=amount,
            fetched_at=utc(2026, 11, 3),
        )
    client.force_login(user_in("fin", "finance"))
    response = client.get("/costs/lines.csv", {"day": "2026-11-02"})
    text = b"".join(response.streaming_content).decode()
    rows = list(csv.reader(io.StringIO(text)))
    header, body = rows[0], rows[1:]
    tag, amount = header.index("tag_value"), header.index("amount")
    cells = {r[tag]: r[amount] for r in body}
    assert cells == {
        '\'=HYPERLINK("http://x")': "3.250000000000",
        "-12.50": "-12.500000000000",  # a number as text: left as it is
    }
    assert ",-12.500000000000," in text  # unquoted: a spreadsheet sums it


def test_the_bill_lines_csv_without_a_day_is_the_latest_billed_day(
    client: Client,
) -> None:
    seed_month(days=3, billed_days=2)
    client.force_login(user_in("fin", "finance"))
    response = client.get("/costs/lines.csv")
    assert response.status_code == 200
    assert (
        "costapp-bill-lines-2026-11-02-amortized.csv" in response["Content-Disposition"]
    )
    assert client.get("/costs/lines.csv", {"day": "2026-13-45"}).status_code == 400
