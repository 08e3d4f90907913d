"""The Django side of bills: allocation on read, reconciliation, export, pages,
backfill planning and confirmation, the refresh schedule, the commands."""

from __future__ import annotations

import csv
import io
from datetime import date, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from costapp.costs import allocations, selectors
from costapp.costs.services import (
    BudgetNotConfirmed,
    PeriodClaimed,
    billing_periods_claim,
    bills_backfill_create,
    bills_backfill_plan,
)
from costapp.costs.tasks import bills_refresh_task
from costapp.models import (
    CostLine,
    Deployment,
    DeploymentHour,
    IngestRun,
    Pool,
    RateCard,
)
from costapp.tasks import ingest_runs_queue
from tests.costs.ce_emulator import CostExplorerEmulator, Line
from tests.costs.conftest import ACCOUNT, utc
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]
D = Decimal
DAY = date(2025, 3, 10)


def line(**kw: object) -> CostLine:
    values: dict[str, object] = {
        "source": "cost_explorer",
        "account_id": ACCOUNT,
        "period_start": utc(2025, 3, 10),
        "service": "",
        "fetched_at": utc(2025, 3, 12),
    }
    values.update(kw)
    return CostLine.objects.create(**values)


@pytest.fixture
def fleet() -> None:
    pool = Pool.objects.create(
        name="p5-pool",
        instance_type="p5.48xlarge",
        gpu_type="H100-80GB",
        gpus_per_node=8,
        cost_rules=[
            {"usage_type": "BoxUsage:p5.48xlarge"},
            {"overhead": {"usage_type": "DataTransfer-Out-Bytes"}, "key": "requests"},
        ],
    )
    for name in ("chat", "code"):
        Deployment.objects.create(
            name=name,
            model_name="m",
            gpu_type="H100-80GB",
            pool=pool,
            instance_type="p5.48xlarge",
        )
    Deployment.objects.create(
        name="embed",
        model_name="e",
        gpu_type="L4",
        instance_type="g6.xlarge",
        cost_rules=[{"tag": {"key": "team", "value": "embed"}}],
    )
    chat, code, embed = (
        Deployment.objects.get(name=n) for n in ("chat", "code", "embed")
    )
    for hour in range(24):
        DeploymentHour.objects.create(
            deployment=chat,
            hour=utc(2025, 3, 10, hour),
            gpu_seconds=4 * 3600,
            requests_stop=30,
        )
        DeploymentHour.objects.create(
            deployment=code,
            hour=utc(2025, 3, 10, hour),
            gpu_seconds=2 * 3600,
            requests_stop=10,
        )
        DeploymentHour.objects.create(
            deployment=embed, hour=utc(2025, 3, 11, hour), gpu_seconds=3600
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
    # One p5 node for the day: 192 GPU-hours paid, 144 used.
    line(
        usage_type="BoxUsage:p5.48xlarge",
        amortized_cost=D("1320.96"),
        unblended_cost=D("1400"),
        usage_quantity=D(24),
        usage_unit="Hrs",
    )
    line(usage_type="DataTransfer-Out-Bytes", amortized_cost=D("0.0000000001"))
    line(
        usage_type="BoxUsage:g6.xlarge",
        tag_key="team",
        tag_value="embed",
        amortized_cost=D("19.3152"),
    )
    line(usage_type="Tax", record_type="tax", amortized_cost=D("5.5"))
    line(
        usage_type="BoxUsage:p5.48xlarge",
        record_type="credit",
        amortized_cost=D("-100"),
        usage_quantity=D(0),
        usage_unit="Hrs",
    )


def test_every_cent_of_the_day_lands_on_a_deployment_idle_or_unallocated(
    fleet: None,
) -> None:
    allocation = allocations.allocation_days_read(
        DAY, DAY + timedelta(days=1), "amortized"
    )
    day = allocation[(ACCOUNT, DAY, "USD")]
    assert day.total == D("1320.96") + D("0.0000000001") + D("19.3152") + D("5.5") - D(
        "100"
    )
    assert day.allocated + day.idle + day.unallocated == day.total
    by = day.by_target()
    assert by["__unallocated__"] == D("5.5")
    assert by["embed"] == D("19.3152")
    # 144 of 192 GPU-hours used: a quarter of the node (net of credit) is idle.
    # (Amounts here keep to 15 significant digits: SQLite stores decimals as
    # REAL, so the smoke run cannot hold more; PostgreSQL holds all 28.)
    assert by["p5-pool/__idle__"] == D("305.24")
    assert by["chat"] == D("610.48") + D("0.000000000075")
    assert by["code"] == D("305.24") + D("0.000000000025")
    billed = allocations.billed_deployment_days_read(DAY, DAY + timedelta(days=1))
    assert set(billed) == {("chat", DAY), ("code", DAY), ("embed", DAY)}
    assert (
        sum(billed.values()) + by["p5-pool/__idle__"] + by["__unallocated__"]
        == day.total
    )


def test_reconciliation_puts_the_rate_card_beside_the_bill(fleet: None) -> None:
    rows = {
        (r.deployment, r.day): r
        for r in allocations.reconciliation_rows_read(DAY, DAY + timedelta(days=2))
    }
    chat = rows[("chat", DAY)]
    assert chat.gpu_hours == D("96.000000")
    assert chat.rate_per_gpu_hour == D("6.88")
    assert chat.provisional == D("660.48")
    assert chat.billed is not None and chat.difference == chat.billed - chat.provisional
    later = rows[("embed", DAY + timedelta(days=1))]
    assert later.provisional_only and later.billed is None
    assert later.provisional == D("19.3152")  # 24 GPU-hours x $0.8048


def test_reconciliation_days_add_up_to_each_days_bill_and_the_page_totals_its_rows(
    fleet: None, client: Client
) -> None:
    for basis in ("amortized", "unblended"):
        days = allocations.reconciliation_days_read(DAY, DAY + timedelta(days=2), basis)
        bills = {
            (b.day, b.currency): b.total
            for b in allocations.bill_days_read(DAY, DAY + timedelta(days=2), basis)
        }
        assert days, basis
        for d in days:
            # To the cent and beyond: the bill's own precision.
            assert d.bill == bills[(d.day, "USD")], (basis, d.day)
            assert d.idle >= 0
    rows = allocations.reconciliation_rows_read(DAY, DAY + timedelta(days=2))
    totals = allocations.reconciliation_totals(rows)
    billed_days = {d.day: d for d in allocations.reconciliation_days_read(
        DAY, DAY + timedelta(days=2))}  # fmt: skip
    assert totals.billed == sum((d.deployments for d in billed_days.values()), D(0))
    assert totals.rows_compared == sum(1 for r in rows if r.billed is not None)
    client.force_login(user_in("fin", "finance", password="pw"))
    page = client.get(
        "/costs/reconciliation/", {"start": DAY.isoformat(), "end": "2025-03-12"}
    ).content.decode()
    assert 'id="reconciliation-total"' in page
    assert f'data-value="{totals.billed}"' in page
    first = next(iter(billed_days.values()))
    assert f'data-value="{first.bill}"' in page
    assert "$" in page[page.index('id="reconciliation-days"') :]


def test_the_export_reconciles_to_the_bill_exactly_in_each_basis(
    fleet: None,
    client: Client,
) -> None:
    client.force_login(user_in("finance", "finance", "admin", password="pw"))
    for basis in ("amortized", "unblended", "net_amortized"):
        response = client.get(
            "/costs/export.csv",
            {"start": "2025-03-10", "end": "2025-03-11", "basis": basis},
        )
        assert response.status_code == 200
        body = b"".join(response.streaming_content).decode()
        rows = list(csv.DictReader(io.StringIO(body)))
        assert list(rows[0])[:9] == [
            "period_start",
            "period_days",
            "account_id",
            "currency",
            "basis",
            "deployment",
            "pool",
            "allocation",
            "status",
        ]
        total = sum(D(r["bill_amount"]) for r in rows if r["bill_amount"])
        expected = sum(selectors.line_amount(x, basis) for x in CostLine.objects.all())
        assert total == expected
        billed = [r["bill_amount"] for r in rows if r["bill_amount"]]
        assert all(len(b.split(".")[1]) == 12 for b in billed)
    bad = client.get("/costs/export.csv", {"start": "2025-03-11", "end": "2025-03-10"})
    assert bad.status_code == 400


def test_the_pages_render_with_each_basis(fleet: None, client: Client) -> None:
    client.force_login(user_in("lead", "tech lead", "admin", password="pw"))
    CostLine.objects.filter(usage_type="Tax").update(estimated=True)
    for url in ("/costs/", "/costs/reconciliation/"):
        for basis in ("amortized", "unblended", "net_amortized"):
            response = client.get(
                url, {"start": "2025-03-01", "end": "2025-03-20", "basis": basis}
            )
            assert response.status_code == 200
    page = client.get("/costs/", {"start": "2025-03-01", "end": "2025-03-20"})
    assert b"estimated" in page.content
    assert client.get("/costs/", {"start": "nonsense"}).status_code == 200
    assert client.get("/costs/backfill/").status_code == 200
    assert client.get("/costs/focus/").status_code == 200


def test_a_backfill_above_budget_asks_for_confirmation(
    ce: CostExplorerEmulator,
    client: Client,
    settings: object,
    django_capture_on_commit_callbacks: object,
) -> None:
    settings.COST_EXPLORER_BUDGET_USD = 0.05  # type: ignore[attr-defined]
    ce.page_size = 100  # one page per query: requests made == requests planned
    ce.add(Line(ACCOUNT, "2025-01-15", "BoxUsage:g6.xlarge", "19.3152"))
    client.force_login(user_in("lead", "tech lead", "admin", password="pw"))
    form = {
        "accounts": ACCOUNT,
        "start": "2025-01-01",
        "end": "2025-03-01",
        "granularity": "DAILY",
        "tag_key": "team",
        "action": "start",
    }
    page = client.post("/costs/backfill/", form)
    assert page.status_code == 200
    assert b"24</strong>" in page.content  # 2 months x 12 record families
    assert b"Above the budget" in page.content
    assert IngestRun.objects.count() == 0
    with django_capture_on_commit_callbacks(execute=True):  # type: ignore[operator]
        done = client.post("/costs/backfill/", {**form, "confirm": "on"})
    assert done.status_code == 302
    run = IngestRun.objects.get()
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert run.api_requests == 24 and run.api_cost_usd == D("0.24")
    assert CostLine.objects.get().amortized_cost == D("19.3152")
    progress = client.get(done["Location"])
    assert b"59 / 59" in progress.content
    with pytest.raises(BudgetNotConfirmed):
        bills_backfill_create(
            account_ids=[ACCOUNT],
            start=date(2025, 1, 1),
            end=date(2025, 3, 1),
            tag_key="team",
        )


def test_a_backfill_of_a_period_owned_by_focus_is_refused() -> None:
    billing_periods_claim(account_id=ACCOUNT, months=[date(2025, 2, 1)], source="focus")
    plan = bills_backfill_plan(
        account_ids=[ACCOUNT], start=date(2025, 1, 20), end=date(2025, 2, 5)
    )
    assert plan.requests == 2 and plan.refused
    with pytest.raises(PeriodClaimed, match="2025-02 already comes from FOCUS"):
        bills_backfill_create(
            account_ids=[ACCOUNT],
            start=date(2025, 1, 20),
            end=date(2025, 2, 5),
            confirmed=True,
        )


@time_machine.travel(utc(2025, 3, 20, 6), tick=False)
def test_the_refresh_repulls_this_month_and_last_while_it_is_estimated(
    ce: CostExplorerEmulator,
    settings: object,
    django_capture_on_commit_callbacks: object,
) -> None:
    settings.COST_EXPLORER_ACCOUNTS = [ACCOUNT]  # type: ignore[attr-defined]
    capture = django_capture_on_commit_callbacks
    ce.add(Line(ACCOUNT, "2025-02-27", "U", "3"), Line(ACCOUNT, "2025-03-19", "U", "4"))
    ce.estimated.update({"2025-02-27", "2025-03-19"})
    with capture(execute=True):  # type: ignore[operator]
        bills_refresh_task()
    run = IngestRun.objects.get()
    assert (run.window_start, run.window_end) == (utc(2025, 3, 1), utc(2025, 3, 21))
    # Last month had no estimated line in the database: only March.
    assert CostLine.objects.count() == 1
    with capture(execute=True):  # type: ignore[operator]
        ingest_runs_queue(
            bills_backfill_create(
                account_ids=[ACCOUNT], start=date(2025, 2, 1), end=date(2025, 3, 1)
            )
        )
    assert CostLine.objects.filter(estimated=True).count() == 2
    with capture(execute=True):  # type: ignore[operator]
        bills_refresh_task()
    latest = IngestRun.objects.order_by("-pk").first()
    assert latest is not None and latest.window_start == utc(2025, 2, 1)


def test_the_commands_plan_refuse_and_import(
    ce: CostExplorerEmulator,
    settings: object,
    django_capture_on_commit_callbacks: object,
) -> None:
    settings.COST_EXPLORER_BUDGET_USD = 0.0  # type: ignore[attr-defined]
    ce.add(Line(ACCOUNT, "2025-01-15", "U", "1.5"))
    args = ["--account", ACCOUNT, "--start", "2025-01-01", "--end", "2025-02-01"]
    with pytest.raises(CommandError, match="--yes"):
        call_command("bills_backfill", *args)
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=True):  # type: ignore[operator]
        call_command("bills_backfill", *args, "--yes", stdout=out)
    assert "1 requests planned" in out.getvalue()
    # (Under the test's transaction the task runs when the block exits.)
    assert IngestRun.objects.get().status == IngestRun.SUCCEEDED
    billing_periods_claim(
        account_id="18938484842", months=[date(2024, 9, 1)], source="cost_explorer"
    )
    with pytest.raises(CommandError, match="refusing to also import it from FOCUS"):
        call_command(
            "focus_import", "tests/costs/fixtures/focus_1.0_sample_aws_first50.csv"
        )
    CostLine.objects.all().delete()
    from costapp.models import BillingPeriodSource

    BillingPeriodSource.objects.all().delete()
    out = io.StringIO()
    call_command(
        "focus_import",
        "tests/costs/fixtures/focus_1.0_sample_aws_first50.csv",
        stdout=out,
    )
    assert "19 account-period(s)" in out.getvalue()


def test_an_uploaded_focus_file_imports_and_a_bad_name_is_refused(
    client: Client,
    settings: object,
    tmp_path: object,
    django_capture_on_commit_callbacks: object,
) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.COSTAPP_UPLOAD_DIR = tmp_path  # type: ignore[attr-defined]
    client.force_login(user_in("finance", "finance", "admin", password="pw"))
    with open("tests/costs/fixtures/focus_1.0_sample_aws_first50.csv", "rb") as f:
        upload = SimpleUploadedFile("sep.csv", f.read(), content_type="text/csv")
    with django_capture_on_commit_callbacks(execute=True):  # type: ignore[operator]
        response = client.post("/costs/focus/", {"file": upload})
    assert response.status_code == 302
    run = IngestRun.objects.get(source="focus")
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert CostLine.objects.filter(source="focus").count() > 0
    page = client.get(response["Location"])
    assert b"succeeded" in page.content
    bad = client.post("/costs/focus/", {"uri": "/etc/passwd"})
    assert bad.status_code == 200
    assert b"only s3://bucket/key URIs" in bad.content
    bad = client.post(
        "/costs/focus/",
        {"file": SimpleUploadedFile("notes.txt", b"x", content_type="text/plain")},
    )
    assert b"expected a .csv" in bad.content
