"""Writes of the bills area: backfills, refreshes, FOCUS imports, period claims.

One source of truth per account and billing month: the first source to write
an account-month claims it (BillingPeriodSource) and the other source is then
refused with the reason, so one account never counts from both Cost Explorer
and a FOCUS export.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from costapp.costs.selectors import allocation_rules, previous_month_estimated
from costapp.ingest import CE_REQUEST_PRICE, batch_write, ingest_run_create
from costapp.models import BillingPeriodSource, IngestRun
from costapp.models.costs import SOURCES
from costapp.sources.base import SourceError, Window
from costapp.sources.cost_explorer import CostExplorerSource, month_chunks
from costapp.sources.focus import FocusSource, period_batch

logger = logging.getLogger(__name__)


class BillsError(ValueError):
    """A request the bills area refuses, with a message for the user."""


class PeriodClaimed(BillsError):
    pass


class BudgetNotConfirmed(BillsError):
    pass


def _months(start: datetime, end: datetime) -> list[date]:
    return [c.start.date().replace(day=1) for c in month_chunks(Window(start, end))]


def _claim_message(claim: BillingPeriodSource, wanted: str) -> str:
    return (
        f"account {claim.account_id} {claim.billing_period:%Y-%m} already comes from "
        f"{claim.get_source_display()} (claimed {claim.claimed_at:%Y-%m-%d %H:%M} UTC); "
        f"refusing to also import it from {wanted}: one source per account and "
        "billing period"
    )


def billing_periods_claim(
    *, account_id: str, months: Iterable[date], source: str
) -> list[BillingPeriodSource]:
    """Claim the months for ``source`` or raise PeriodClaimed naming the owner.

    Call inside the transaction that writes the lines, so a refused or failed
    import leaves no claim behind.
    """
    claims = []
    for month in sorted(set(m.replace(day=1) for m in months)):
        claim = (
            BillingPeriodSource.objects.select_for_update()
            .filter(account_id=account_id, billing_period=month)
            .first()
        )
        if claim is None:
            try:
                with transaction.atomic():
                    claim = BillingPeriodSource.objects.create(
                        account_id=account_id, billing_period=month, source=source
                    )
            except IntegrityError:  # claimed concurrently; read who won
                claim = BillingPeriodSource.objects.get(
                    account_id=account_id, billing_period=month
                )
        if claim.source != source:
            raise PeriodClaimed(
                _claim_message(claim, dict(SOURCES).get(source, source))
            )
        claims.append(claim)
    return claims


# -- Cost Explorer backfill ---------------------------------------------------


def _window(start: date, end: date) -> Window:
    try:
        return Window(
            datetime.combine(start, datetime.min.time(), tzinfo=UTC),
            datetime.combine(end, datetime.min.time(), tzinfo=UTC),
        )
    except ValueError as exc:
        raise BillsError(f"window: {exc}") from None


def _group_by(tag_key: str) -> list[dict[str, str]]:
    group_by = [{"Type": "DIMENSION", "Key": "USAGE_TYPE"}]
    if tag_key:
        group_by.append({"Type": "TAG", "Key": tag_key})
    return group_by


@dataclass(frozen=True)
class BackfillPlan:
    account_ids: tuple[str, ...]
    window: Window
    granularity: str
    tag_key: str
    requests: int
    cost_usd: Decimal
    budget_usd: Decimal
    refused: tuple[str, ...]  # account-months another source owns

    @property
    def over_budget(self) -> bool:
        return self.cost_usd > self.budget_usd

    @property
    def params(self) -> dict[str, Any]:
        return {
            "granularity": self.granularity,
            "group_by": _group_by(self.tag_key),
        }


def bills_backfill_plan(
    *,
    account_ids: Sequence[str],
    start: date,
    end: date,
    granularity: str = "DAILY",
    tag_key: str = "",
    now: datetime | None = None,
) -> BackfillPlan:
    """Requests planned (before pagination; each page is another $0.01) and
    their cost, without calling AWS."""
    window = _window(start, end)
    try:
        source = CostExplorerSource(
            account_ids=list(account_ids),
            granularity=granularity,
            group_by=_group_by(tag_key),
            now=now,
        )
        requests = source.plan(window)
    except SourceError as exc:
        raise BillsError(str(exc)) from None
    refused = []
    for account in account_ids:
        for claim in BillingPeriodSource.objects.filter(
            account_id=account, billing_period__in=_months(window.start, window.end)
        ).exclude(source="cost_explorer"):
            refused.append(_claim_message(claim, "AWS Cost Explorer"))
    return BackfillPlan(
        account_ids=tuple(account_ids),
        window=window,
        granularity=granularity,
        tag_key=tag_key,
        requests=requests,
        cost_usd=CE_REQUEST_PRICE * requests,
        budget_usd=Decimal(str(settings.COST_EXPLORER_BUDGET_USD)),
        refused=tuple(refused),
    )


@transaction.atomic
def bills_backfill_start(
    *,
    account_ids: Sequence[str],
    start: date,
    end: date,
    granularity: str = "DAILY",
    tag_key: str = "",
    confirmed: bool = False,
    queue: str | None = None,
    now: datetime | None = None,
) -> list[IngestRun]:
    """Claim the account-months, create one run per account, queue them.

    Refuses (BillsError) a window another source owns, and a plan above
    settings.COST_EXPLORER_BUDGET_USD unless ``confirmed``.
    """
    plan = bills_backfill_plan(
        account_ids=account_ids,
        start=start,
        end=end,
        granularity=granularity,
        tag_key=tag_key,
        now=now,
    )
    if plan.refused:
        raise PeriodClaimed("; ".join(plan.refused))
    if plan.over_budget and not confirmed:
        raise BudgetNotConfirmed(
            f"this backfill plans {plan.requests} Cost Explorer requests "
            f"(${plan.cost_usd:.2f}, more with pagination), above the budget of "
            f"${plan.budget_usd:.2f}: confirm to go ahead"
        )
    runs = []
    for account in plan.account_ids:
        billing_periods_claim(
            account_id=account,
            months=_months(plan.window.start, plan.window.end),
            source="cost_explorer",
        )
        run = ingest_run_create(
            source="cost_explorer",
            window=plan.window,
            target=account,
            params={"account_ids": [account], **plan.params},
        )
        runs.append(run)
    for run in runs:
        _queue_ingest(run.pk, queue)
    return runs


def _queue_ingest(run_id: int, queue: str | None) -> None:
    from costapp.tasks import ingest_run_task

    def send() -> None:
        if queue:
            result = ingest_run_task.apply_async((run_id,), queue=queue)
        else:
            result = ingest_run_task.delay(run_id)
        if result.id:
            IngestRun.objects.filter(pk=run_id).update(celery_task_id=result.id)

    transaction.on_commit(send)


def bills_refresh(*, today: date | None = None) -> list[IngestRun]:
    """Re-pull the current month (and the previous one while any of its lines
    is still estimated) for every watched account, so estimates become final.
    The schedule is the budget: it is not asked for confirmation."""
    today = today or timezone.now().date()
    first = today.replace(day=1)
    start = first
    if previous_month_estimated(today) or today.day <= 3:
        # Early in a month last month's final figures are still arriving.
        start = (first - timedelta(days=1)).replace(day=1)
    runs: list[IngestRun] = []
    tag_keys = allocation_rules().tag_keys
    for account in settings.COST_EXPLORER_ACCOUNTS:
        try:
            runs += bills_backfill_start(
                account_ids=[account],
                start=start,
                end=today + timedelta(days=1),
                tag_key=tag_keys[0] if tag_keys else "",
                confirmed=True,
            )
        except BillsError as exc:
            logger.warning("bills refresh skipped account %s: %s", account, exc)
    return runs


# -- FOCUS import ---------------------------------------------------------------


def focus_import_start(*, uri: str, queue: str | None = None) -> IngestRun:
    """Create the run and queue its import (costapp.costs.tasks.focus_import_task)."""
    now = timezone.now()
    run = ingest_run_create(
        source="focus",
        window=Window(now, now + timedelta(seconds=1)),
        target=uri[:200],
        params={"uri": uri},
    )
    from costapp.costs.tasks import focus_import_task

    def send() -> None:
        if queue:
            focus_import_task.apply_async((run.pk,), queue=queue)
        else:
            focus_import_task.delay(run.pk)

    transaction.on_commit(send)
    return run


def focus_import_execute(*, run: IngestRun, chunk_rows: int | None = None) -> IngestRun:
    """Read and check the whole file, then replace every (account, billing
    period) it holds in ONE transaction, after claiming each period for FOCUS.
    A malformed row or a period another source owns writes nothing."""
    uri = run.params.get("uri") or run.target
    source = FocusSource(
        uri=uri,
        tag_keys=run.params.get("tag_keys") or allocation_rules().tag_keys,
        **({"chunk_rows": chunk_rows} if chunk_rows else {}),
    )
    IngestRun.objects.filter(pk=run.pk).update(
        status=IngestRun.RUNNING, started_at=timezone.now(), error=""
    )
    try:
        periods = source.scan()
        if not periods:
            raise SourceError(
                f"{source.display_name}: no rows to import", permanent=True
            )
        starts = [p.start for p in periods.values()]
        ends = [p.end for p in periods.values()]
        IngestRun.objects.filter(pk=run.pk).update(
            steps_total=len(periods), window_start=min(starts), window_end=max(ends)
        )
        with transaction.atomic():
            for period in periods.values():
                billing_periods_claim(
                    account_id=period.account_id,
                    months=_months(period.start, period.end),
                    source="focus",
                )
                batch_write(batch=period_batch(period), source="focus", run=run)
    except (SourceError, BillsError) as exc:
        IngestRun.objects.filter(pk=run.pk).update(
            status=IngestRun.FAILED, error=str(exc), finished_at=timezone.now()
        )
    else:
        IngestRun.objects.filter(pk=run.pk).update(
            status=IngestRun.SUCCEEDED, finished_at=timezone.now()
        )
    run.refresh_from_db()
    return run
