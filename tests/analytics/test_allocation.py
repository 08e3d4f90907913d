from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.allocation import (
    IDLE,
    UNALLOCATED,
    AllocationError,
    BillLine,
    DayUsage,
    Overhead,
    PoolUsage,
    Rule,
    allocate_day,
    split,
)

D = Decimal
DEPLOYMENTS = ["chat", "code", "embed", "rerank"]
USAGE_TYPES = ["BoxUsage:p5.48xlarge", "BoxUsage:g6.xlarge", "DataTransfer-Out-Bytes"]
TAGS = [("", ""), ("team", "chat"), ("team", "code"), ("team", "")]


def test_it_splits_a_pool_node_line_by_gpu_hours_and_leaves_the_rest_idle() -> None:
    # One p5 node (8 GPUs) for 24 h = 192 GPU-hours paid; 96 + 48 used.
    line = BillLine(
        "l1", D("2400.000000000000"), "BoxUsage:p5.48xlarge", usage_hours=D(24)
    )
    result = allocate_day(
        lines=[line],
        rules=[Rule("gpu-pool", "usage_type", "BoxUsage:p5.48xlarge", pool=True)],
        pools=[PoolUsage("gpu-pool", members=("chat", "code"))],
        usage=DayUsage(gpu_hours={"chat": D(96), "code": D(48)}),
    )
    assert result.by_target() == {
        "chat": D("1200"),
        "code": D("600"),
        f"gpu-pool/{IDLE}": D("600"),
    }


def test_it_prefers_a_resource_rule_over_a_tag_rule_over_a_usage_type_rule() -> None:
    line = BillLine(
        "l1",
        D("10"),
        "BoxUsage:g6.xlarge",
        resource_id="i-1",
        tag_key="team",
        tag_value="chat",
    )
    rules = [
        Rule("embed", "usage_type", "BoxUsage:g6.xlarge"),
        Rule("chat", "tag", "chat", tag_key="team"),
        Rule("code", "resource_id", "i-1"),
    ]
    assert allocate_day(lines=[line], rules=rules).by_target() == {"code": D("10")}
    assert allocate_day(lines=[line], rules=rules[:2]).by_target() == {"chat": D("10")}


def test_it_keeps_what_no_rule_claims_visible_as_unallocated() -> None:
    result = allocate_day(lines=[BillLine("l1", D("3.5"), "Tax")])
    assert result.by_target() == {UNALLOCATED: D("3.5")}


def test_it_spreads_a_declared_overhead_by_requests() -> None:
    lines = [BillLine("egress", D("1.000000000000"), "DataTransfer-Out-Bytes")]
    result = allocate_day(
        lines=lines,
        overheads=[Overhead("usage_type", "DataTransfer-Out-Bytes", key="requests")],
        usage=DayUsage(requests={"chat": D(2), "code": D(1)}),
    )
    assert result.by_target() == {
        "chat": D("0.666666666667"),
        "code": D("0.333333333333"),
    }


def test_it_allocates_a_credit_on_a_tagged_line_to_the_same_deployment() -> None:
    lines = [
        BillLine("use", D("5"), tag_key="team", tag_value="chat"),
        BillLine(
            "credit", D("-2"), tag_key="team", tag_value="chat", record_type="credit"
        ),
    ]
    result = allocate_day(lines=lines, rules=[Rule("chat", "tag", "chat", "team")])
    assert result.by_target() == {"chat": D("3")}


def test_it_refuses_amounts_beyond_the_stored_precision() -> None:
    with pytest.raises(AllocationError, match="12 decimal places"):
        allocate_day(lines=[BillLine("l", D("0.0000000000001"))])


def test_it_splits_by_largest_remainder_exactly() -> None:
    parts = split(
        D("0.000000000010"),
        [("a", Fraction(1)), ("b", Fraction(1)), ("c", Fraction(1))],
    )
    assert parts == [D("4e-12"), D("3e-12"), D("3e-12")]
    assert sum(parts) == D("1e-11")


# --- properties ------------------------------------------------------------

amounts = st.decimals(
    min_value=D("-1000"),
    max_value=D("100000"),
    places=12,
    allow_nan=False,
    allow_infinity=False,
)
non_negative = st.decimals(
    min_value=D("0"),
    max_value=D("100000"),
    places=12,
    allow_nan=False,
    allow_infinity=False,
)


def lines_strategy(amount: st.SearchStrategy[Decimal]) -> st.SearchStrategy:
    line = st.builds(
        lambda i, a, u, t, r, h: BillLine(
            f"l{i}",
            a,
            u,
            resource_id=r,
            tag_key=t[0],
            tag_value=t[1],
            usage_hours=h,
        ),
        st.integers(0, 10_000),
        amount,
        st.sampled_from([*USAGE_TYPES, ""]),
        st.sampled_from(TAGS),
        st.sampled_from(["", "i-1", "i-2"]),
        st.one_of(st.none(), st.decimals(min_value=D(0), max_value=D(48), places=3)),
    )
    return st.lists(line, max_size=12)


rules_strategy = st.lists(
    st.one_of(
        st.builds(
            Rule,
            st.sampled_from(DEPLOYMENTS),
            st.just("usage_type"),
            st.sampled_from(USAGE_TYPES),
        ),
        st.builds(
            Rule,
            st.sampled_from(DEPLOYMENTS),
            st.just("tag"),
            st.sampled_from(["chat", "code"]),
            st.just("team"),
        ),
        st.builds(
            Rule,
            st.sampled_from(DEPLOYMENTS),
            st.just("resource_id"),
            st.sampled_from(["i-1", "i-2"]),
        ),
        st.builds(
            Rule,
            st.sampled_from(["p1", "p2"]),
            st.just("usage_type"),
            st.sampled_from(USAGE_TYPES),
            st.just(""),
            st.just(True),
        ),
    ),
    max_size=6,
)
usage_strategy = st.builds(
    DayUsage,
    st.dictionaries(
        st.sampled_from(DEPLOYMENTS),
        st.decimals(min_value=D(0), max_value=D(500), places=4),
        max_size=4,
    ),
    st.dictionaries(
        st.sampled_from(DEPLOYMENTS),
        st.decimals(min_value=D(0), max_value=D(10**6), places=0),
        max_size=4,
    ),
)
pools_strategy = st.just(
    [
        PoolUsage("p1", members=("chat", "code")),
        PoolUsage("p2", key="requests", gpus_per_node=1, members=("embed", "rerank")),
    ]
)
overheads_strategy = st.lists(
    st.builds(
        Overhead,
        st.just("usage_type"),
        st.sampled_from(USAGE_TYPES),
        st.sampled_from(["gpu_hours", "requests", "cost"]),
        st.just(""),
        st.sampled_from(["", "p1", "p2"]),
    ),
    max_size=2,
)


@given(
    lines_strategy(amounts),
    rules_strategy,
    pools_strategy,
    overheads_strategy,
    usage_strategy,
)
def test_any_bill_and_any_rules_reconcile_exactly(
    lines, rules, pools, overheads, usage
) -> None:
    result = allocate_day(
        lines=lines, rules=rules, pools=pools, overheads=overheads, usage=usage
    )
    total = sum((line.amount for line in lines), D(0))
    assert result.allocated + result.idle + result.unallocated == total
    assert sum(result.by_target().values(), D(0)) == total
    # Every line is accounted for exactly once.
    for line in lines:
        mine = sum((s.amount for s in result.shares if s.line_key == line.key), D(0))
        same_key = sum((x.amount for x in lines if x.key == line.key), D(0))
        assert mine == same_key
    for share in result.shares:
        assert share.amount == share.amount.quantize(D("1e-12"))


@given(
    lines_strategy(non_negative),
    rules_strategy,
    pools_strategy,
    overheads_strategy,
    usage_strategy,
)
def test_no_share_is_negative_and_idle_never_is_from_non_negative_bills(
    lines, rules, pools, overheads, usage
) -> None:
    result = allocate_day(
        lines=lines, rules=rules, pools=pools, overheads=overheads, usage=usage
    )
    assert all(share.amount >= 0 for share in result.shares)
    assert result.idle >= 0
