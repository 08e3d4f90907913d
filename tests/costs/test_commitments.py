"""Savings-plan and reserved-instance lines kept apart by every source, and
their coverage and utilisation on the bills page."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest
from django.test import Client

from costapp.costs.commitments import NONE_TEXT, commitments_read
from costapp.ingest import ingest_run_create, records_write
from costapp.models import CostLine, IngestRun
from costapp.sources.base import CostRecord, Window
from costapp.sources.cost_explorer import (
    COMMITMENTS,
    FAMILIES,
    CostExplorerSource,
    records_from_response,
)
from costapp.sources.focus import FocusSource
from costapp.sources.focus_csv import FocusError
from tests.costs.ce_emulator import CostExplorerEmulator, Line
from tests.costs.conftest import ACCOUNT, utc
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]
D = Decimal
EC2 = "Amazon Elastic Compute Cloud - Compute"
SAMPLE = Path(__file__).parent / "fixtures" / "focus_1.0_sample_aws_first50.csv"


def test_every_commitment_record_type_is_a_family_of_its_own() -> None:
    families = dict(FAMILIES)
    assert families["usage"] == ("Usage",)
    assert families["usage:reserved"] == ("DiscountedUsage",)
    assert families["usage:savings_plan"] == ("SavingsPlanCoveredUsage",)
    assert families["fee:savings_plan"] == (
        "SavingsPlanRecurringFee",
        "SavingsPlanUpfrontFee",
    )
    assert set(COMMITMENTS) <= {v for values in families.values() for v in values}


def test_covered_and_on_demand_usage_of_one_usage_type_are_two_lines() -> None:
    page = {
        "ResultsByTime": [
            {
                "TimePeriod": {"Start": "2025-03-01", "End": "2025-03-02"},
                "Groups": [
                    {
                        "Keys": ["BoxUsage:g6e.xlarge", record_type],
                        "Metrics": {"UnblendedCost": {"Amount": "10", "Unit": "USD"}},
                    }
                    for record_type in ("Usage", "SavingsPlanCoveredUsage")
                ],
            }
        ]
    }
    group_by = [
        {"Type": "DIMENSION", "Key": "USAGE_TYPE"},
        {"Type": "DIMENSION", "Key": "RECORD_TYPE"},
    ]
    records = records_from_response(page, account_id=ACCOUNT, group_by=group_by)
    assert [(r.record_type, r.commitment) for r in records] == [
        ("usage", ""),
        ("usage", "savings_plan"),
    ]
    records_write(records=records, source="cost_explorer")
    assert sorted(CostLine.objects.values_list("commitment", flat=True)) == [
        "",
        "savings_plan",
    ]


@pytest.mark.integration
def test_with_two_group_keys_each_commitment_family_is_its_own_query(
    ce: CostExplorerEmulator,
) -> None:
    ce.add(Line(ACCOUNT, "2025-03-01", "BoxUsage:g6e.xlarge", "10", quantity="4"))
    ce.add(
        Line(
            ACCOUNT,
            "2025-03-01",
            "BoxUsage:g6e.xlarge",
            "6",
            record_type="DiscountedUsage",
            amounts={"UnblendedCost": "0"},
            quantity="20",
        )
    )
    ce.add(Line(ACCOUNT, "2025-03-01", "HeavyUsage:g6e.xlarge", "0", "RIFee"))
    source = CostExplorerSource(
        account_ids=[ACCOUNT],
        group_by=[
            {"Type": "DIMENSION", "Key": "USAGE_TYPE"},
            {"Type": "DIMENSION", "Key": "SERVICE"},
        ],
    )
    assert source.plan(Window(utc(2025, 3, 1), utc(2025, 3, 2))) == len(FAMILIES) + 1
    from costapp.ingest import ingest_run_execute

    run = ingest_run_create(
        source="cost_explorer", window=Window(utc(2025, 3, 1), utc(2025, 3, 2))
    )
    run = ingest_run_execute(run=run, source=source)
    assert run.status == IngestRun.SUCCEEDED, run.error
    assert sorted(
        CostLine.objects.values_list("usage_type", "record_type", "commitment")
    ) == [
        ("BoxUsage:g6e.xlarge", "usage", ""),
        ("BoxUsage:g6e.xlarge", "usage", "reserved"),
        ("HeavyUsage:g6e.xlarge", "fee", "reserved"),
    ]


def _record(day: int, **kw: object) -> CostRecord:
    values: dict[str, object] = {
        "account_id": ACCOUNT,
        "period_start": utc(2025, 3, day),
        "service": EC2,
        "usage_unit": "Hrs",
    }
    values.update(kw)
    return CostRecord(**values)  # type: ignore[arg-type]


def _reserved_march() -> None:
    """Every day of March 2025: 44 of 68 EC2 hours on two reserved instances
    (48 hours a day), the other 4 reserved hours unused."""
    records = []
    for day in range(1, 32):
        records += [
            _record(day, usage_type="BoxUsage", unblended_cost=D("24"),
                    amortized_cost=D("24"), usage_quantity=D("24")),
            _record(day, usage_type="BoxUsage", commitment="reserved",
                    unblended_cost=D(0), amortized_cost=D("44"),
                    usage_quantity=D("44")),
            _record(day, usage_type="HeavyUsage", record_type="fee",
                    commitment="reserved", unblended_cost=D(0),
                    amortized_cost=D("4"), usage_quantity=D("4")),
        ]  # fmt: skip
    records.append(_record(31, service="Tax", record_type="tax", usage_unit=""))
    records_write(records=records, source="cost_explorer")


def test_reserved_coverage_is_in_hours_and_utilisation_in_dollars() -> None:
    _reserved_march()
    found = commitments_read(date(2025, 3, 10), date(2025, 3, 12))
    assert found is not None
    (month,) = found.months
    assert (month.period, month.kind, month.status) == (
        "2025-03",
        "reserved instances",
        "final",
    )
    # 44 of 68 hours a day were covered; $44 of the $48 paid a day was used.
    assert (month.coverage, month.basis) == ("64.7%", "hours")
    assert (month.covered, month.eligible) == ("1,364 h", "2,108 h")
    assert (month.utilisation, month.used, month.unused, month.paid) == (
        "91.7%",
        "$1,364.00",
        "$124.00",
        "$1,488.00",
    )
    assert [d.period for d in found.days] == ["2025-03-10", "2025-03-11"]
    assert found.services == [EC2]


def test_a_month_the_bill_has_not_reached_the_end_of_is_partial() -> None:
    _reserved_march()
    CostLine.objects.filter(period_start__gte=utc(2025, 3, 20)).delete()
    CostLine.objects.filter(period_start=utc(2025, 3, 19)).update(estimated=True)
    found = commitments_read(date(2025, 3, 18), date(2025, 3, 20))
    assert found is not None
    assert [m.status for m in found.months] == ["partial"]
    assert [(d.period, d.status) for d in found.days] == [
        ("2025-03-18", "final"),
        ("2025-03-19", "partial"),
    ]


def test_the_focus_sample_savings_plan_row_gives_coverage_not_utilisation() -> None:
    from costapp.sources.base import Batch

    batches: list[Batch] = list(
        FocusSource(uri=str(SAMPLE)).fetch(Window(utc(2024, 9, 1), utc(2024, 10, 1)))
    )
    records = [r for b in batches for r in b.records]
    assert [r.commitment for r in records if r.commitment] == ["savings_plan"]
    records_write(records=records, source="focus")  # type: ignore[arg-type]
    found = commitments_read(date(2024, 9, 1), date(2024, 10, 1))
    assert found is not None
    (month,) = found.months
    # Its ListCost $0.0464 of the EC2 hours' $0.3864 (the other: $0.34);
    # EffectiveCost is 0 on every row of the sample, so nothing was paid.
    assert (month.kind, month.basis) == ("savings plans", "on-demand equivalent $")
    assert month.coverage == "12.0%" and month.utilisation == "\u2013"


def test_an_unknown_commitment_status_is_refused_with_its_row(tmp_path: Path) -> None:
    text = SAMPLE.read_text().replace('"Used","Savings Plan"', '"Spent","Savings Plan"')
    path = tmp_path / "focus.csv"
    path.write_text(text)
    with pytest.raises(FocusError, match="CommitmentDiscountStatus: 'Spent'"):
        FocusSource(uri=str(path)).scan()


def test_the_bills_page_shows_commitments_or_says_there_are_none(
    client: Client,
) -> None:
    client.force_login(user_in("finance", "finance", password="pw"))
    query = {"preset": "custom", "start": "2025-03-10", "end": "2025-03-12"}
    empty = client.get("/costs/", query).content.decode()
    assert NONE_TEXT.capitalize() in empty and "0.0%" not in empty
    _reserved_march()
    page = client.get("/costs/", {**query, "end": "2025-03-13"}).content.decode()
    assert "reserved instances" in page and "64.7%" in page and "91.7%" in page
    assert NONE_TEXT.capitalize() not in page
