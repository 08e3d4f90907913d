from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.commitments import HOURS, ON_DEMAND, commitment_figures
from analytics.errors import InvalidInput

EC2 = "Amazon Elastic Compute Cloud - Compute"
NAN = math.nan


def line(
    record_type: str = "usage",
    commitment: str = "",
    *,
    on_demand: float = NAN,
    amortized: float = 0.0,
    quantity: float = NAN,
    unit: str = "Hrs",
    service: str = EC2,
    period: str = "2026-11",
    currency: str = "USD",
) -> dict[str, Any]:
    return {
        "period": period,
        "currency": currency,
        "service": service,
        "record_type": record_type,
        "commitment": commitment,
        "usage_unit": unit,
        "on_demand": on_demand,
        "amortized": amortized,
        "quantity": quantity,
    }


def figures(*rows: dict[str, Any], partial: tuple[str, ...] = ()) -> list[Any]:
    return commitment_figures(pd.DataFrame(list(rows)), partial=partial)


def test_a_savings_plan_is_judged_at_its_on_demand_equivalent() -> None:
    # Cost Explorer: covered usage's unblended cost is its on-demand price,
    # its amortized cost the commitment it used; the recurring fee's
    # amortized cost is what nothing used.
    (sp,) = figures(
        line(on_demand=40.0, amortized=40.0, quantity=10),
        line("usage", "savings_plan", on_demand=60.0, amortized=42.0, quantity=15),
        line("discount", "savings_plan", on_demand=-60.0, amortized=0.0),
        line("fee", "savings_plan", on_demand=50.0, amortized=8.0),
    )
    assert sp.commitment == "savings_plan" and sp.coverage_basis == ON_DEMAND
    assert sp.coverage == pytest.approx(60 / 100)
    assert (sp.used, sp.unused, sp.commitment_cost) == (42.0, 8.0, 50.0)
    assert sp.utilisation == pytest.approx(42 / 50)
    assert not sp.partial


def test_reserved_hours_without_an_on_demand_price_are_judged_in_hours() -> None:
    # The demo's two reserved g6e.xlarge: 48 of a day's 75 EC2 hours, fully used.
    (ri,) = figures(
        line(on_demand=3 * 1.861, amortized=3 * 1.861, quantity=3),
        line("usage", "reserved", amortized=48 * 1.861 * 0.62, quantity=48),
        line(on_demand=24 * 55.04, amortized=24 * 55.04, quantity=24),
        line("fee", "reserved", amortized=0.0),
        line(on_demand=2.4, amortized=2.4, quantity=24, service="EKS"),
    )
    assert ri.coverage_basis == HOURS
    assert (ri.covered, ri.eligible) == (48.0, 75.0)
    assert ri.coverage == pytest.approx(0.64)
    assert ri.utilisation == 1.0 and ri.unused == 0.0


def test_the_two_kinds_add_up_to_what_any_commitment_covered() -> None:
    sp, ri = figures(
        line(on_demand=50.0, amortized=50.0, quantity=5, unit="Hours"),
        line("usage", "savings_plan", on_demand=30.0, amortized=20.0, unit="Hours"),
        line("usage", "reserved", on_demand=20.0, amortized=12.0, unit="Hours"),
    )
    assert (sp.commitment, ri.commitment) == ("savings_plan", "reserved")
    assert sp.coverage == pytest.approx(0.3) and ri.coverage == pytest.approx(0.2)


def test_a_commitment_nothing_used_is_zero_utilisation_and_no_coverage() -> None:
    (ri,) = figures(
        line(on_demand=10.0, amortized=10.0, quantity=1),
        line("fee", "reserved", amortized=33.5),
    )
    assert ri.utilisation == 0.0 and ri.unused == 33.5
    assert ri.coverage is None and ri.coverage_basis == ""


def test_nothing_paid_leaves_utilisation_missing_not_zero() -> None:
    (sp,) = figures(
        line("usage", "savings_plan", on_demand=0.0464, amortized=0.0, unit="Hours"),
        line(on_demand=0.34, amortized=0.0, unit="Hours"),
    )
    assert sp.utilisation is None and sp.commitment_cost == 0.0
    assert sp.coverage == pytest.approx(0.0464 / 0.3864)


def test_coverage_is_missing_when_neither_basis_can_measure_it() -> None:
    (ri,) = figures(
        line("usage", "reserved", amortized=5.0, quantity=2, unit="GB-Mo"),
        line(on_demand=1.0, amortized=1.0, quantity=4, unit="GB-Mo"),
    )
    assert ri.coverage is None and ri.coverage_basis == ""
    assert ri.covered is None and ri.eligible is None


def test_an_unknown_amortized_cost_makes_utilisation_unknown() -> None:
    (sp,) = figures(
        line("usage", "savings_plan", on_demand=6.0, amortized=NAN, quantity=1),
        line("fee", "savings_plan", amortized=1.0),
    )
    assert sp.used is None and sp.utilisation is None
    assert sp.coverage == 1.0


def test_periods_and_currencies_are_apart_and_partial_is_labelled() -> None:
    out = figures(
        line("usage", "reserved", on_demand=1.0, amortized=1.0, period="2026-10"),
        line("usage", "reserved", on_demand=1.0, amortized=1.0, period="2026-11"),
        line("usage", "reserved", on_demand=1.0, amortized=1.0, currency="EUR"),
        partial=("2026-11",),
    )
    assert [(f.period, f.currency, f.partial) for f in out] == [
        ("2026-10", "USD", False),
        ("2026-11", "EUR", True),
        ("2026-11", "USD", True),
    ]


def test_lines_without_a_commitment_give_no_figures() -> None:
    assert figures(line(on_demand=1.0, amortized=1.0, quantity=1)) == []
    assert commitment_figures(pd.DataFrame([line()]).iloc[0:0]) == []


def test_a_missing_column_is_refused_by_name() -> None:
    with pytest.raises(InvalidInput, match="on_demand"):
        commitment_figures(pd.DataFrame([line()]).drop(columns=["on_demand"]))


amounts = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(st.lists(st.tuples(st.sampled_from(["", "savings_plan"]), amounts, amounts),
                min_size=1, max_size=8), amounts)  # fmt: skip
def test_coverage_and_utilisation_stay_between_0_and_1(
    usage: list[tuple[str, float, float]], unused: float
) -> None:
    rows = [
        line("usage", c, on_demand=od, amortized=am, quantity=1) for c, od, am in usage
    ]
    rows.append(line("fee", "savings_plan", amortized=unused))
    (sp,) = figures(*rows)
    for share in (sp.coverage, sp.utilisation):
        assert share is None or 0 <= share <= 1 + 1e-12
    assert sp.commitment_cost == pytest.approx((sp.used or 0) + unused)
