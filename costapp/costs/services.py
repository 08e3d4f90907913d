"""Writes of the bills area: backfills, refreshes, FOCUS imports, period claims.

One source of truth per account and billing month: the first source to write
an account-month claims it (BillingPeriodSource) and the other source is then
refused with the reason, so one account never counts from both Cost Explorer
and a FOCUS export.

Services create and run rows; they never queue. The caller (a view, a command,
a beat task) queues what a service returned, with ``costapp.tasks
.ingest_runs_queue`` or ``focus_import_task.delay_on_commit``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from analytics.errors import InvalidInput
from costapp.costs.export.write import Target, month_export_write, previous_month
from costapp.costs.selectors import (
    BASES,
    Basis,
    allocation_rules_read,
    previous_month_estimated_read,
)
from costapp.days import utc_midnight
from costapp.ingest import CE_REQUEST_PRICE, batch_write, ingest_run_create
from costapp.models import BillingPeriodSource, CostLine, IngestRun
from costapp.models.costs import SOURCES
from costapp.sources.base import SourceError, Window
from costapp.sources.cost_explorer import CostExplorerSource, month_chunks
from costapp.sources.focus import FocusSource, period_batch
from costapp.validation import account_id_in, date_in, filename_in, text_in

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
    """The backfill's window; both dates within the supported range."""
    try:
        start = date_in(start, field="start")
        end = date_in(end, field="end")
    except InvalidInput as exc:
        raise BillsError(str(exc)) from None
    if end <= start:
        raise BillsError(f"end={end.isoformat()!r}: must be after start {start}")
    return Window(
        utc_midnight(start),
        utc_midnight(end),
    )


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
    families: int = 1  # queries per account-month (12 with a tag breakdown)

    @property
    def over_budget(self) -> bool:
        return self.cost_usd > self.budget_usd

    @property
    def params(self) -> dict[str, Any]:
        # ``families`` lets the progress page count months from steps without
        # building an adapter (costs.selectors.run_progress).
        return {
            "granularity": self.granularity,
            "group_by": _group_by(self.tag_key),
            "families": self.families,
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
        accounts = [account_id_in(a, field="account_ids") for a in account_ids]
        tag_key = text_in(tag_key, field="tag_key", max_length=128).strip()
    except InvalidInput as exc:
        raise BillsError(str(exc)) from None
    try:
        source = CostExplorerSource(
            account_ids=accounts,
            granularity=granularity,
            group_by=_group_by(tag_key),
            now=now,
        )
        requests = source.plan(window)
    except SourceError as exc:
        raise BillsError(str(exc)) from None
    refused = []
    for account in accounts:
        for claim in BillingPeriodSource.objects.filter(
            account_id=account, billing_period__in=_months(window.start, window.end)
        ).exclude(source="cost_explorer"):
            refused.append(_claim_message(claim, "AWS Cost Explorer"))
    return BackfillPlan(
        account_ids=tuple(accounts),
        window=window,
        granularity=granularity,
        tag_key=tag_key,
        requests=requests,
        cost_usd=CE_REQUEST_PRICE * requests,
        budget_usd=Decimal(str(settings.COST_EXPLORER_BUDGET_USD)),
        refused=tuple(refused),
        families=len(source.families),
    )


@transaction.atomic
def bills_backfill_create(
    *,
    account_ids: Sequence[str],
    start: date,
    end: date,
    granularity: str = "DAILY",
    tag_key: str = "",
    confirmed: bool = False,
    now: datetime | None = None,
) -> list[IngestRun]:
    """Claim the account-months and create one run per account, atomically.
    Returns the runs; the caller queues them (costapp.tasks.ingest_runs_queue).

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
    return runs


def bills_claims_release(*, run: IngestRun) -> int:
    """After a Cost Explorer run that failed (or stopped part-way), give back
    the claims on the account-months it did not store, so a FOCUS import of
    those months is not refused forever. A month that holds Cost Explorer lines
    (this run's or an earlier one's) keeps its claim. Returns claims deleted."""
    if run.source != "cost_explorer" or run.status not in {
        IngestRun.FAILED,
        IngestRun.PARTIAL,
    }:
        return 0
    accounts = (run.params or {}).get("account_ids") or [run.target]
    released = 0
    with transaction.atomic():
        for account in accounts:
            for chunk in month_chunks(Window(run.window_start, run.window_end)):
                month = chunk.start.date().replace(day=1)
                first = utc_midnight(month)
                following = (first + timedelta(days=32)).replace(day=1)
                stored = CostLine.objects.filter(
                    source="cost_explorer",
                    account_id=account,
                    period_start__gte=first,
                    period_start__lt=following,
                ).exists()
                if stored:
                    continue
                deleted, _ = BillingPeriodSource.objects.filter(
                    account_id=account, billing_period=month, source="cost_explorer"
                ).delete()
                released += deleted
    if released:
        logger.info("run %s released %d unused claim(s)", run.pk, released)
    return released


def bills_refresh_create(*, today: date | None = None) -> list[IngestRun]:
    """Runs that re-pull the current month (and the previous one while any of
    its lines is still estimated) for every watched account, so estimates
    become final. The schedule is the budget: it is not asked for
    confirmation. The caller queues the runs."""
    today = today or timezone.now().date()
    first = today.replace(day=1)
    start = first
    if previous_month_estimated_read(today) or today.day <= 3:
        # Early in a month last month's final figures are still arriving.
        start = (first - timedelta(days=1)).replace(day=1)
    runs: list[IngestRun] = []
    tag_keys = allocation_rules_read().tag_keys
    for account in settings.COST_EXPLORER_ACCOUNTS:
        try:
            runs += bills_backfill_create(
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

FOCUS_SUFFIXES = (".csv", ".csv.gz", ".parquet", ".parq", ".csv.zip", ".csv.bz2")


def upload_dir() -> Path:
    """Where uploads wait for the worker: under COSTAPP_VAR_DIR, a volume the
    web and worker containers share (docker-compose.yml)."""
    return Path(settings.COSTAPP_UPLOAD_DIR)


def focus_name_check(name: str, *, field: str = "file") -> str:
    """A FOCUS file name: a plain name of at most 200 characters with a
    suffix the reader knows."""
    try:
        name = filename_in(name, field=field, max_length=200)
    except InvalidInput as exc:
        raise BillsError(str(exc)) from None
    if not name.lower().endswith(FOCUS_SUFFIXES):
        raise BillsError(f"{field}={name!r}: expected a .csv, .csv.gz or .parquet file")
    return name


def focus_uri_check(uri: str) -> str:
    """An s3:// URI under one of the prefixes an admin allows in
    COSTAPP_FOCUS_S3_PREFIXES; a server path or any other bucket is refused
    before anything is opened (the answer never tells whether it exists)."""
    try:
        uri = text_in(uri, field="uri", max_length=1000, required=True).strip()
    except InvalidInput as exc:
        raise BillsError(str(exc)) from None
    allowed = [p for p in settings.COSTAPP_FOCUS_S3_PREFIXES if p.startswith("s3://")]
    bucket, _, key = uri[5:].partition("/") if uri.startswith("s3://") else ("", "", "")
    if not bucket or not key or ".." in key.split("/"):
        raise BillsError(
            f"uri={uri[:80]!r}: only s3://bucket/key URIs under an allowed prefix "
            "are read; upload a local file instead"
        )
    if not any(uri.startswith(p.rstrip("/") + "/") for p in allowed):
        shown = ", ".join(allowed) if allowed else "none configured"
        raise BillsError(
            f"uri={uri[:80]!r}: not under an S3 prefix allowed in "
            f"COSTAPP_FOCUS_S3_PREFIXES ({shown})"
        )
    focus_name_check(key.rsplit("/", 1)[-1], field="uri")
    return uri


def _upload_check(path: Path) -> Path:
    folder = upload_dir().resolve()
    resolved = Path(path).resolve()
    if folder not in resolved.parents:
        raise BillsError(f"upload={str(path)[:80]!r}: not in the upload directory")
    return resolved


def focus_import_create(
    *,
    upload: Path | None = None,
    name: str = "",
    uri: str = "",
    tag_keys: Sequence[str] | None = None,
) -> IngestRun:
    """The run of one FOCUS import: an uploaded file (already stored in the
    upload directory; ``name`` is the name the user gave it) or an S3 URI an
    admin allows. The caller queues ``focus_import_task`` with the run's id."""
    if (upload is None) == (not uri):
        raise BillsError("give either an uploaded file or an S3 URI")
    if upload is not None:
        path = _upload_check(upload)
        shown = focus_name_check(name or path.name)
        params: dict[str, Any] = {"upload": str(path), "name": shown}
        target = shown
    else:
        uri = focus_uri_check(uri)
        params = {"uri": uri}
        target = uri
    if tag_keys is not None:
        params["tag_keys"] = list(tag_keys)
    now = timezone.now()
    return ingest_run_create(
        source="focus",
        window=Window(now, now + timedelta(seconds=1)),
        target=target[:200],
        params=params,
    )


def focus_run_check(run: IngestRun) -> None:
    """What a worker may open for a run: an upload in the upload directory or
    an allowed S3 URI (a stored run's parameters are input too)."""
    params = run.params or {}
    if params.get("upload"):
        _upload_check(Path(params["upload"]))
    else:
        focus_uri_check(str(params.get("uri") or run.target))


def focus_import_execute(
    *, run: IngestRun, chunk_rows: int | None = None, trusted: bool = False
) -> IngestRun:
    """Read and check the whole file, then replace every (account, billing
    period) it holds in ONE transaction, after claiming each period for FOCUS.
    A malformed row or a period another source owns writes nothing.

    ``trusted`` (the ``focus_import`` command, run by an operator on the
    server) may name a local path; otherwise only an upload or an allowed S3
    URI is opened. Whatever happens, the run does not stay "running".
    """
    params = run.params or {}
    run.start()
    try:
        if not trusted:
            focus_run_check(run)
        uri = params.get("upload") or params.get("uri") or run.target
        source = FocusSource(
            uri=uri,
            tag_keys=params.get("tag_keys") or allocation_rules_read().tag_keys,
            display_name=params.get("name") or None,
            max_bytes=settings.COSTAPP_FOCUS_MAX_DECOMPRESSED_BYTES,
            max_inflation=settings.COSTAPP_FOCUS_MAX_INFLATION,
            **({"chunk_rows": chunk_rows} if chunk_rows else {}),
        )
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
        run.fail(str(exc))
    except Exception as exc:  # recorded on the run, then re-raised for the log
        run.fail(f"{type(exc).__name__}: {exc}")
        raise
    else:
        run.finish(IngestRun.SUCCEEDED)
    return run


def month_export_due(*, today: date) -> list[str]:
    """The previous month's export, if a target is set and the month is old
    enough; the files written (none: off, not due, or already written). A
    setting that cannot be used is logged as an error and writes nothing."""
    if not settings.COSTAPP_MONTHLY_EXPORT_TO:
        return []
    _, end = previous_month(today)
    if today < end + timedelta(days=settings.COSTAPP_MONTHLY_EXPORT_AFTER_DAYS):
        return []
    basis = settings.COSTAPP_MONTHLY_EXPORT_BASIS
    try:
        target = Target.parse(settings.COSTAPP_MONTHLY_EXPORT_TO)
        if basis not in BASES:
            raise ValueError(
                f"COSTAPP_MONTHLY_EXPORT_BASIS={basis!r}: {', '.join(BASES)}"
            )
    except ValueError as exc:
        logger.error("month-end export not written: %s", exc)
        return []
    return month_export_write(today=today, target=target, basis=cast(Basis, basis))
