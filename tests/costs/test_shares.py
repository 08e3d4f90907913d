"""The stored allocation (CostShare) equals a fresh one after every change of
its inputs: a restated bill day, a late telemetry hour in a pool, a pool
change through the fleet file; a stale or never-stored day is allocated on
the fly meanwhile, and the export reads the same bytes either way."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from costapp.costs.allocations import (
    allocation_days_read,
    allocations_compute,
    stored_days_read,
)
from costapp.costs.export.build import Export, ExportSpec
from costapp.costs.export.files import csv_rows, parquet_write, summary_csv
from costapp.costs.export.rows import SCHEMA_FIELDS
from costapp.costs.selectors import BASES
from costapp.costs.shares import cost_shares_rebuild
from costapp.csv_export import csv_lines
from costapp.ingest import ingest_run_create, ingest_run_execute
from costapp.models import (
    CostExportDay,
    CostExportRow,
    CostShare,
    CostShareDay,
    CostUsageDay,
    Deployment,
    IngestRun,
    RateCard,
)
from costapp.sources.base import (
    Batch,
    CostRecord,
    DeploymentHourRecord,
    ReplaceScope,
    Window,
)
from tests.costs.conftest import ACCOUNT, utc
from tests.support.pipeline import pipeline_run

pytestmark = pytest.mark.django_db
D = Decimal
START = date(2026, 11, 1)
DAYS = 3
END = START + timedelta(days=DAYS)
TAG = "costapp:workload"


def fleet_text(*, key: str = "gpu_hours", code_pool: bool = True) -> str:
    """A pool of two deployments (chat, code) and a tagged one (embed)."""
    deployment = """\
  - name: {name}
    team: {team}
    engine: vllm
    engine_version: "0.10.1"
    model: m
    gpu_type: H100-SXM
    gpu_count: 1
    tensor_parallel_size: 1
    instance_type: p5.48xlarge
    region: us-east-1
    account_id: "{account}"
    prometheus_selector: 'app="{name}"'
{extra}"""
    pool = "    pool: p5\n"
    return (
        "pools:\n"
        "  - name: p5\n"
        "    instance_type: p5.48xlarge\n"
        "    region: us-east-1\n"
        "    gpu_type: H100-SXM\n"
        "    gpus_per_node: 8\n"
        f"    allocation_key: {key}\n"
        "    cost_rules:\n"
        f'      - tag: {{key: "{TAG}", value: p5}}\n'
        "deployments:\n"
        + deployment.format(name="chat", team="a", account=ACCOUNT, extra=pool)
        + deployment.format(
            name="code",
            team="b",
            account=ACCOUNT,
            extra=pool
            if code_pool
            else f'    cost_rules:\n      - tag: {{key: "{TAG}", value: code}}\n',
        )
        + deployment.format(
            name="embed",
            team="b",
            account=ACCOUNT,
            extra=f'    cost_rules:\n      - tag: {{key: "{TAG}", value: embed}}\n',
        )
    )


@dataclass
class ListSource:
    """A source that hands the ingest pipeline batches given in the test."""

    name: str
    batches: list[Batch] = field(default_factory=list)

    def plan(self, window: Window) -> int:
        return len(self.batches)

    def fetch(self, window: Window) -> Iterator[Batch]:
        yield from self.batches


def run_of(source: str, start: datetime, end: datetime, batch: Batch) -> IngestRun:
    run = ingest_run_create(source=source, window=Window(start, end))
    run = ingest_run_execute(run=run, source=ListSource(source, [batch]))
    assert run.status == IngestRun.SUCCEEDED, run.error
    return run


P5_DAY = Decimal("1320.9600000001")


def bill(day: date, *, p5: Decimal = P5_DAY) -> Batch:
    at = utc(day.year, day.month, day.day)
    records = [
        CostRecord(
            account_id=ACCOUNT, period_start=at, service="EC2",
            usage_type="BoxUsage:p5.48xlarge", tag_key=TAG, tag_value=value,
            amortized_cost=amount, unblended_cost=amount + D("1e-12"),
            net_amortized_cost=None if value == "p5" else amount,
            usage_quantity=D(24) if value == "p5" else None,
            usage_unit="Hrs" if value == "p5" else "",
        )
        for value, amount in (
            ("p5", p5), ("embed", D("19.3152000003")), ("code", D("7.25")),
        )
    ] + [
        CostRecord(
            account_id=ACCOUNT, period_start=at, service="Tax",
            record_type="tax", amortized_cost=D("5.5000000007"),
            unblended_cost=D("5.5000000007"),
        )
    ]  # fmt: skip
    scope = ReplaceScope("cost_explorer", ACCOUNT, at, at + timedelta(days=1))
    return Batch(list(records), scope)


def hours(day: date, rows: list[tuple[str, int, float, float]]) -> Batch:
    """(deployment, hour, GPU-seconds, requests) rows of one day."""
    return Batch(
        [
            DeploymentHourRecord(
                deployment=name,
                hour=utc(day.year, day.month, day.day, h),
                gpu_seconds=gpu_s,
                requests_stop=req,
                prompt_tokens=req * 700,
                generation_tokens=req * 130,
                replicas_mean=1,
            )
            for name, h, gpu_s, req in rows
        ]
    )


@pytest.fixture
def fleet(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(fleet_text())
    call_command("fleet_load", str(path), stdout=io.StringIO())
    for i in range(DAYS):
        day = START + timedelta(days=i)
        run_of("cost_explorer", _at(day), _at(day + timedelta(1)), bill(day))
        telemetry = [
            (name, h, gpu_s, req)
            for h in range(0, 24, 2)
            for name, gpu_s, req in (
                ("chat", 5 * 3600.0, 31.0),
                ("code", 2 * 3600.0, 7.0),
                ("embed", 3600.0, 3.0),
            )
        ]
        run_of("prometheus", _at(day), _at(day + timedelta(1)), hours(day, telemetry))
    return path


def _at(day: date) -> datetime:
    return utc(day.year, day.month, day.day)


def assert_stored_equals_fresh() -> None:
    assert stored_days_read(START, END) == {
        START + timedelta(days=i) for i in range(DAYS)
    }
    for basis in BASES:
        fresh = allocations_compute(START, END, [basis])[basis]  # type: ignore[list-item]
        assert allocation_days_read(START, END, basis) == fresh  # type: ignore[arg-type]
        assert fresh  # a real comparison: three billed days


def share_of(day: date, target: str = "chat") -> Decimal:
    key = (ACCOUNT, day, "USD")
    return allocation_days_read(START, END, "amortized")[key].by_target()[target]


def chat_share(day: date) -> Decimal:
    return share_of(day, "chat")


def test_the_stored_shares_equal_a_fresh_allocation_after_a_restated_bill_day(
    fleet: Path,
) -> None:
    cost_shares_rebuild()
    assert_stored_equals_fresh()
    stored_rows = CostShare.objects.count()
    assert stored_rows > 0 and CostUsageDay.objects.count() == 3 * DAYS
    day = START + timedelta(days=1)
    before = chat_share(day)

    run_of("cost_explorer", _at(day), _at(day + timedelta(1)), bill(day, p5=D(100)))
    # The run finished after the day was stored: its shares are not read,
    # the day is allocated on the fly from the restated lines.
    assert day not in stored_days_read(START, END)
    fresh = allocations_compute(START, END, ["amortized"])["amortized"]
    assert allocation_days_read(START, END, "amortized") == fresh
    assert chat_share(day) < before

    result = cost_shares_rebuild()
    assert result.days == 1  # only the stale day
    assert_stored_equals_fresh()
    stored_day = CostShare.objects.filter(day=day, basis="amortized").aggregate(
        t=Sum("amount")
    )["t"]
    assert stored_day == D(100) + D("19.3152000003") + D("7.25") + D("5.5000000007")
    assert CostShare.objects.count() == stored_rows  # replaced whole, not added


def test_a_late_telemetry_hour_in_a_pool_changes_the_split_and_the_store_follows(
    fleet: Path,
) -> None:
    cost_shares_rebuild()
    day = START
    code, idle = share_of(day, "code"), share_of(day, "p5/__idle__")
    run_of("prometheus", _at(day), _at(day + timedelta(1)),
           hours(day, [("code", 1, 8 * 3600.0, 50.0)]))  # fmt: skip
    assert day not in stored_days_read(START, END)
    # code used more of the pool's paid GPU-hours: more of the node line is
    # code's, less of it the pool's idle.
    assert share_of(day, "code") > code and share_of(day, "p5/__idle__") < idle
    # The pipeline's step after an ingest restores the stale day.
    pipeline_run(["cost_shares"])
    assert_stored_equals_fresh()
    assert share_of(day, "code") > code
    assert CostUsageDay.objects.get(day=day, deployment="code").gpu_hours == D(32)


def test_a_pool_change_through_the_fleet_file_restores_the_shares(
    fleet: Path,
) -> None:
    cost_shares_rebuild()
    idle = share_of(START, "p5/__idle__")
    digest = set(CostShareDay.objects.values_list("rules_digest", flat=True))
    fleet.write_text(fleet_text(key="requests", code_pool=False))
    out = io.StringIO()
    call_command("fleet_load", str(fleet), stdout=out)
    assert f"cost shares (the allocated bill): {DAYS} rows" in out.getvalue()
    assert set(CostShareDay.objects.values_list("rules_digest", flat=True)) != digest
    assert_stored_equals_fresh()
    # code left the pool: its GPU-hours no longer use the pool's paid ones.
    assert share_of(START, "p5/__idle__") > idle
    by = allocation_days_read(START, END, "amortized")[(ACCOUNT, START, "USD")]
    assert by.by_target()["code"] == D("7.25")


def test_a_rule_changed_outside_the_fleet_file_is_never_read_stale(
    fleet: Path,
) -> None:
    from costapp.models import Pool

    cost_shares_rebuild()
    Pool.objects.filter(name="p5").update(gpus_per_node=4)
    assert stored_days_read(START, END) == set()
    fresh = allocations_compute(START, END, ["amortized"])["amortized"]
    assert allocation_days_read(START, END, "amortized") == fresh


def export_text(spec: ExportSpec) -> tuple[str, str]:
    export = Export(spec)
    return "".join(csv_rows(export)), "".join(summary_csv(export))


def export_parquet(spec: ExportSpec) -> pa.Table:
    out = io.BytesIO()
    parquet_write(Export(spec), out)
    return pq.read_table(io.BytesIO(out.getvalue()))


@pytest.mark.parametrize(
    ("grain", "by", "basis"),
    [
        ("day", "deployment", "amortized"),
        ("month", "deployment", "net_amortized"),
        ("month", "team", "unblended"),
        ("day", "team", "net_amortized"),
    ],
)
def test_the_export_reads_the_same_bytes_from_stored_shares_as_on_the_fly(
    fleet: Path, grain: str, by: str, basis: str
) -> None:
    # One more day with telemetry but no bill: provisional rows too.
    spec = ExportSpec(
        start=START,
        end=END + timedelta(days=1),
        grain=grain,  # type: ignore[arg-type]
        by=by,  # type: ignore[arg-type]
        basis=basis,  # type: ignore[arg-type]
    )
    day = END
    run_of("prometheus", _at(day), _at(day + timedelta(1)),
           hours(day, [("chat", 3, 3600.0, 4.0)]))  # fmt: skip
    live = export_text(spec)  # nothing stored yet: every day on the fly
    live_parquet = export_parquet(spec)
    assert not CostShareDay.objects.exists()
    cost_shares_rebuild()
    assert CostShareDay.objects.count() == DAYS + 1
    stored = export_text(spec)
    assert stored == live
    assert export_parquet(spec).equals(live_parquet)  # typed, money decimal128
    rows = list(csv.DictReader(io.StringIO(stored[0])))
    assert {r["status"] for r in rows} >= {"final", "provisional"}
    (summary,) = csv.DictReader(io.StringIO(stored[1]))
    assert D(summary["difference"]) == 0 and D(summary["bill_total_stored"]) > 0
    # By deployment the stored days' rows are read whole (CostExportRow: a
    # mark put in them shows in the file); under another digest the same
    # rows are rebuilt from the stored shares.
    if by == "deployment":
        CostExportRow.objects.filter(basis=basis).update(allocation="stored row")
        assert export_text(spec)[0].count("stored row") == len(rows)
    CostExportDay.objects.update(digest="")
    assert export_text(spec) == stored
    assert export_parquet(spec).equals(live_parquet)


def test_stored_export_rows_are_not_read_once_the_rate_card_or_a_home_changes(
    fleet: Path,
) -> None:
    spec = ExportSpec(start=START, end=END + timedelta(days=1))
    day = END  # telemetry, no bill: a provisional day, priced by the rate card
    RateCard.objects.all().delete()  # not even the list prices the load added
    run_of("prometheus", _at(day), _at(day + timedelta(1)),
           hours(day, [("chat", 3, 3600.0, 4.0)]))  # fmt: skip
    cost_shares_rebuild()
    before = export_text(spec)
    (row,) = [r for r in csv.DictReader(io.StringIO(before[0]))
              if r["status"] == "provisional"]  # fmt: skip
    assert row["provisional_cost"] == ""  # no rate card yet
    RateCard.objects.create(
        gpu_type="H100-SXM", instance_type="p5.48xlarge", price=D("55.04"),
        gpus_per_unit=8, effective_from=START, source="test",
    )  # fmt: skip
    after = export_text(spec)
    (row,) = [r for r in csv.DictReader(io.StringIO(after[0]))
              if r["status"] == "provisional"]  # fmt: skip
    assert D(row["provisional_cost"]) == D("6.88")  # 1 GPU-hour at 55.04 / 8
    # What the export read is what it builds from the shares today.
    CostExportDay.objects.update(digest="")
    assert export_text(spec) == after
    # The days built under the old rate card are stale to the store: all of
    # them are stored again under today's digest.
    assert cost_shares_rebuild().days == DAYS + 1
    assert cost_shares_rebuild().days == 0
    assert export_text(spec) == after
    # A deployment moved to another account: its rows move with it.
    Deployment.objects.filter(name="chat").update(account_id="999999999999")
    moved = export_text(spec)
    assert "999999999999" in moved[0] and moved != after
    CostExportDay.objects.update(digest="")
    assert export_text(spec) == moved


@pytest.mark.parametrize("by", ["team", "deployment"])
def test_the_fast_csv_is_byte_for_byte_the_formula_safe_writer(
    fleet: Path, by: str
) -> None:
    # By deployment the stored rows are read with their money as text.
    cost_shares_rebuild()
    spec = ExportSpec(start=START, end=END + timedelta(days=1), by=by)  # type: ignore[arg-type]
    fast = "".join(csv_rows(Export(spec)))
    export = Export(spec)
    names = [c for c, _ in SCHEMA_FIELDS]
    reference = "".join(
        csv_lines(spec.columns, ([r[c] for c in names] for r in export.records()))
    )
    assert fast == reference
    assert fast.count("\r\n") > 10


def test_costs_allocate_stores_the_missing_days_then_nothing_unless_told_all(
    fleet: Path,
) -> None:
    out = io.StringIO()
    call_command("costs_allocate", stdout=out)
    assert out.getvalue().startswith(f"stored {DAYS} day(s)")
    assert_stored_equals_fresh()
    out = io.StringIO()
    call_command("costs_allocate", stdout=out)
    assert out.getvalue().startswith("stored 0 day(s)")
    out = io.StringIO()
    call_command(
        "costs_allocate", "--start", str(START), "--end", str(END), "--all", stdout=out
    )
    assert out.getvalue().startswith(f"stored {DAYS} day(s)")
    with pytest.raises(CommandError, match=r"--start '2026-13-01': not a date"):
        call_command("costs_allocate", "--start", "2026-13-01")


def test_a_write_outside_any_run_drops_the_mark_of_the_days_it_touches(
    fleet: Path,
) -> None:
    from costapp.models import CostLine, DeploymentHour

    cost_shares_rebuild()
    second, third = START + timedelta(days=1), START + timedelta(days=2)
    # In this fleet code has no tag rule: its tagged line is unallocated.
    before = share_of(second, "__unallocated__")
    # A hand edit (admin, shell): no run records it, the trigger does.
    CostLine.objects.filter(period_start=_at(second), tag_value="code").update(
        amortized_cost=D("70")
    )
    DeploymentHour.objects.filter(hour=_at(third)).delete()
    assert stored_days_read(START, END) == {START}
    fresh = allocations_compute(START, END, ["amortized"])["amortized"]
    assert allocation_days_read(START, END, "amortized") == fresh
    assert share_of(second, "__unallocated__") == before - D("7.25") + D(70)
    assert cost_shares_rebuild().days == 2
    assert_stored_equals_fresh()
