"""Cost Explorer adapter against the emulator over HTTP (boto3 via AWS_ENDPOINT_URL)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from decimal import Decimal

import pytest
import time_machine

from costapp.ingest import ingest_run_create, ingest_run_execute
from costapp.models import CostLine, IngestRun
from costapp.sources.base import SourceError, Window
from costapp.sources.cost_explorer import CostExplorerSource
from tests.costs.ce_emulator import CostExplorerEmulator, Line
from tests.costs.conftest import ACCOUNT, utc

pytestmark = [pytest.mark.django_db, pytest.mark.integration, pytest.mark.smoke]
D = Decimal


def run(source: CostExplorerSource, start: datetime, end: datetime) -> IngestRun:
    run = ingest_run_create(source="cost_explorer", window=Window(start, end))
    return ingest_run_execute(run=run, source=source)


def source(**kwargs: object) -> CostExplorerSource:
    kwargs.setdefault("account_ids", [ACCOUNT])
    kwargs.setdefault("max_attempts", 4)
    return CostExplorerSource(**kwargs)  # type: ignore[arg-type]


def no_duplicates() -> None:
    keys = Counter(CostLine.objects.values_list(*CostLine.NATURAL_KEY))
    assert all(n == 1 for n in keys.values())


def by_day_and_type() -> dict[tuple[str, str, str], tuple[Decimal, bool]]:
    return {
        (f"{line.period_start:%Y-%m-%d %H}", line.usage_type, line.record_type): (
            line.amortized_cost,
            line.estimated,
        )
        for line in CostLine.objects.all()
    }


def test_it_follows_next_page_token_over_several_pages(
    ce: CostExplorerEmulator,
) -> None:
    for day in range(1, 11):
        ce.add(Line(ACCOUNT, f"2025-03-{day:02d}", "BoxUsage:p5.48xlarge", f"{day}.5"))
        ce.add(Line(ACCOUNT, f"2025-03-{day:02d}", "EBS:VolumeUsage.gp3", "0.25"))
    result = run(source(), utc(2025, 3, 1), utc(2025, 3, 11))
    assert result.status == IngestRun.SUCCEEDED
    # 20 groups, 4 per page: 5 pages, each one a paid request.
    assert ce.successful_pages == 5
    assert result.api_requests == 5
    assert result.api_cost_usd == D("0.05")
    assert result.steps_total == 1 and result.steps_done == 1
    assert CostLine.objects.count() == 20
    lines = by_day_and_type()
    assert lines[("2025-03-07 00", "BoxUsage:p5.48xlarge", "usage")] == (
        D("7.5"),
        False,
    )
    no_duplicates()


def test_a_restated_day_replaces_the_estimate_and_a_vanished_group_vanishes(
    ce: CostExplorerEmulator,
) -> None:
    ce.add(
        Line(ACCOUNT, "2025-03-01", "BoxUsage:p5.48xlarge", "10.00"),
        Line(ACCOUNT, "2025-03-01", "DataTransfer-Out-Bytes", "1.00"),
    )
    ce.estimated.add("2025-03-01")
    run(source(), utc(2025, 3, 1), utc(2025, 3, 2))
    assert by_day_and_type() == {
        ("2025-03-01 00", "BoxUsage:p5.48xlarge", "usage"): (D("10.00"), True),
        ("2025-03-01 00", "DataTransfer-Out-Bytes", "usage"): (D("1.00"), True),
    }
    ce.ledger = [Line(ACCOUNT, "2025-03-01", "BoxUsage:p5.48xlarge", "12.34")]
    ce.estimated.clear()
    run(source(), utc(2025, 3, 1), utc(2025, 3, 2))
    assert by_day_and_type() == {
        ("2025-03-01 00", "BoxUsage:p5.48xlarge", "usage"): (D("12.34"), False),
    }
    no_duplicates()


def test_it_backs_off_when_throttled_twice_on_one_page_then_succeeds(
    ce: CostExplorerEmulator,
) -> None:
    for day in range(1, 4):
        for n in range(3):
            ce.add(Line(ACCOUNT, f"2025-03-{day:02d}", f"Usage{n}", "1.0000000001"))
    ce.fail("LimitExceededException", times=1, page=1)
    ce.fail("ThrottlingException", times=1, page=1)
    result = run(source(), utc(2025, 3, 1), utc(2025, 3, 4))
    assert result.status == IngestRun.SUCCEEDED
    assert [c["result"] for c in ce.calls if c["page"] == 1] == [
        "LimitExceededException",
        "ThrottlingException",
        "ok",
    ]
    assert CostLine.objects.count() == 9
    assert {line.amortized_cost for line in CostLine.objects.all()} == {
        D("1.0000000001")
    }
    no_duplicates()


def test_request_changed_restarts_the_window_without_committing_half(
    ce: CostExplorerEmulator,
) -> None:
    for day in range(1, 6):
        for n in range(2):
            ce.add(Line(ACCOUNT, f"2025-03-{day:02d}", f"Usage{n}", "2"))
    ce.fail("RequestChangedException", times=1, page=2)
    result = run(source(), utc(2025, 3, 1), utc(2025, 3, 6))
    assert result.status == IngestRun.SUCCEEDED
    # Pages 0 and 1, the refused page 2, then the whole window again (3 pages).
    assert result.api_requests == 6
    assert CostLine.objects.count() == 10
    assert sum(line.amortized_cost for line in CostLine.objects.all()) == D("20")
    no_duplicates()


def test_data_that_keeps_changing_fails_the_run_with_aws_words(
    ce: CostExplorerEmulator,
) -> None:
    for day in range(1, 6):
        ce.add(Line(ACCOUNT, f"2025-03-{day:02d}", "U", "1"))
        ce.add(Line(ACCOUNT, f"2025-03-{day:02d}", "V", "1"))
    ce.fail("RequestChangedException", times=10, page=1, message="data changed")
    result = run(source(), utc(2025, 3, 1), utc(2025, 3, 6))
    assert result.status == IngestRun.FAILED
    assert "data changed" in result.error
    assert CostLine.objects.count() == 0


def test_a_window_over_a_month_boundary_is_two_account_periods(
    ce: CostExplorerEmulator,
) -> None:
    for d in ("2025-01-30", "2025-01-31", "2025-02-01", "2025-02-02"):
        ce.add(Line(ACCOUNT, d, "BoxUsage:g6.xlarge", "19.3152"))
    s = source()
    assert s.plan(Window(utc(2025, 1, 30), utc(2025, 2, 3))) == 2
    result = run(s, utc(2025, 1, 30), utc(2025, 2, 3))
    assert result.steps_done == 2
    periods = [c["body"]["TimePeriod"] for c in ce.calls]
    assert periods == [
        {"Start": "2025-01-30", "End": "2025-02-01"},
        {"Start": "2025-02-01", "End": "2025-02-03"},
    ]
    assert CostLine.objects.count() == 4
    # Rerunning only February leaves January alone.
    ce.ledger = [line for line in ce.ledger if line.start < "2025-02-01"]
    run(source(), utc(2025, 2, 1), utc(2025, 2, 3))
    assert sorted(
        f"{x:%m-%d}" for x in CostLine.objects.values_list("period_start", flat=True)
    ) == ["01-30", "01-31"]


@time_machine.travel(utc(2025, 3, 20, 12), tick=False)
def test_hourly_granularity_inside_the_trailing_fourteen_days(
    ce: CostExplorerEmulator,
) -> None:
    for hour in range(3):
        ce.add(
            Line(
                ACCOUNT,
                f"2025-03-15T{hour:02d}:00:00Z",
                "BoxUsage:p5.48xlarge",
                "2.3333333333",
                quantity="1",
            )
        )
    s = source(granularity="HOURLY")
    result = run(s, utc(2025, 3, 15), utc(2025, 3, 15, 3))
    assert result.status == IngestRun.SUCCEEDED
    assert ce.calls[0]["body"]["TimePeriod"] == {
        "Start": "2025-03-15T00:00:00Z",
        "End": "2025-03-15T03:00:00Z",
    }
    assert list(
        CostLine.objects.order_by("period_start").values_list(
            "granularity", "period_start", "amortized_cost"
        )
    ) == [("hour", utc(2025, 3, 15, h), D("2.3333333333")) for h in range(3)]
    with pytest.raises(SourceError, match="trailing 14 days"):
        s.plan(Window(utc(2025, 3, 1), utc(2025, 3, 2)))


def test_zero_cost_days_store_zero_and_empty_days_store_nothing(
    ce: CostExplorerEmulator,
) -> None:
    ce.add(Line(ACCOUNT, "2025-03-01", "BoxUsage:t4g.micro", "0.0000000000"))
    ce.add(Line(ACCOUNT, "2025-03-03", "BoxUsage:t4g.micro", "0.5"))
    run(source(), utc(2025, 3, 1), utc(2025, 3, 4))
    assert by_day_and_type() == {
        ("2025-03-01 00", "BoxUsage:t4g.micro", "usage"): (D("0"), False),
        ("2025-03-03 00", "BoxUsage:t4g.micro", "usage"): (D("0.5"), False),
    }


def test_credits_and_refunds_keep_their_sign_and_record_type(
    ce: CostExplorerEmulator,
) -> None:
    ce.add(
        Line(ACCOUNT, "2025-03-01", "BoxUsage:p5.48xlarge", "100.0000000001"),
        Line(ACCOUNT, "2025-03-01", "BoxUsage:p5.48xlarge", "-25.5", "Credit"),
        Line(ACCOUNT, "2025-03-01", "BoxUsage:p5.48xlarge", "-0.0000000001", "Refund"),
        Line(ACCOUNT, "2025-03-01", "Tax", "8.1234567891", "Tax"),
    )
    run(source(), utc(2025, 3, 1), utc(2025, 3, 2))
    lines = by_day_and_type()
    assert lines == {
        ("2025-03-01 00", "BoxUsage:p5.48xlarge", "usage"): (
            D("100.0000000001"),
            False,
        ),
        ("2025-03-01 00", "BoxUsage:p5.48xlarge", "credit"): (D("-25.5"), False),
        ("2025-03-01 00", "BoxUsage:p5.48xlarge", "refund"): (D("-1E-10"), False),
        ("2025-03-01 00", "Tax", "tax"): (D("8.1234567891"), False),
    }
    total = sum(a for a, _ in lines.values())
    assert total == D("82.6234567891")


def test_amounts_with_ten_decimals_are_stored_exactly(
    ce: CostExplorerEmulator,
) -> None:
    ce.add(
        Line(
            ACCOUNT,
            "2025-03-01",
            "U",
            "0.1234567891",
            amounts={
                "UnblendedCost": "0.9876543219",
                "NetAmortizedCost": "0.1111111111",
            },
        )
    )
    run(source(), utc(2025, 3, 1), utc(2025, 3, 2))
    line = CostLine.objects.get()
    assert (line.amortized_cost, line.unblended_cost, line.net_amortized_cost) == (
        D("0.1234567891"),
        D("0.9876543219"),
        D("0.1111111111"),
    )
    assert str(line.amortized_cost.normalize()) == "0.1234567891"


def test_a_tag_breakdown_takes_one_filtered_query_per_record_family(
    ce: CostExplorerEmulator,
) -> None:
    ce.add(
        Line(
            ACCOUNT, "2025-03-01", "BoxUsage:p5.48xlarge", "50", tags={"team": "chat"}
        ),
        Line(
            ACCOUNT,
            "2025-03-01",
            "BoxUsage:p5.48xlarge",
            "-5",
            "Credit",
            tags={"team": "chat"},
        ),
        Line(ACCOUNT, "2025-03-01", "Support", "3", "Enterprise Support Fee"),
    )
    s = source(
        group_by=[
            {"Type": "DIMENSION", "Key": "USAGE_TYPE"},
            {"Type": "TAG", "Key": "team"},
        ]
    )
    # One query per family: usage, fee, credit, refund, tax and discount, the
    # commitments' usage, fees and negations apart, and the catch-all.
    assert s.plan(Window(utc(2025, 3, 1), utc(2025, 3, 2))) == 12
    result = run(s, utc(2025, 3, 1), utc(2025, 3, 2))
    assert result.api_requests == 12
    assert sorted(
        CostLine.objects.values_list(
            "usage_type", "record_type", "tag_key", "tag_value", "amortized_cost"
        )
    ) == [
        ("BoxUsage:p5.48xlarge", "credit", "team", "chat", D("-5")),
        ("BoxUsage:p5.48xlarge", "usage", "team", "chat", D("50")),
        ("Support", "other", "team", "", D("3")),
    ]


def test_data_unavailable_fails_the_run_with_the_aws_error_text(
    ce: CostExplorerEmulator,
) -> None:
    ce.fail("DataUnavailableException", times=1, message="Data is not available.")
    result = run(source(), utc(2025, 3, 1), utc(2025, 3, 2))
    assert result.status == IngestRun.FAILED
    assert "DataUnavailableException" in result.error
    assert "Data is not available." in result.error


def test_bad_options_are_refused_with_the_field_and_value() -> None:
    with pytest.raises(SourceError, match="12-digit"):
        CostExplorerSource(account_ids=["abc"])
    with pytest.raises(SourceError, match="at most 2"):
        source(
            group_by=[
                {"Type": "DIMENSION", "Key": k}
                for k in ("SERVICE", "USAGE_TYPE", "REGION")
            ]
        )
    with pytest.raises(SourceError, match="MONTHLY"):
        source(granularity="MONTHLY")
