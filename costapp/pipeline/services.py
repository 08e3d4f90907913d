"""The pipeline's bookkeeping: requests, claims, leases and the reaper's read.

Each step has one ``PipelineStep`` row (``costapp.models.pipeline``). Every
write here is one short transaction on that row, so a step that runs for
minutes holds no database lock, only its lease:

- ``pipeline_request`` merges a change into the steps' ``pending`` and raises
  their ``requested`` version (a durable queue: the broker may lose the task,
  the row keeps the work).
- ``step_claim`` takes the lease and moves ``pending`` (and the ``inflight``
  of a holder whose lease ran out) to ``inflight``; a step already leased is
  not claimed, so at most one run of a step is ever in progress, and what
  arrives meanwhile is done by one follow-up.
- ``step_finish`` records the version consumed; ``step_fail`` puts the work
  back into ``pending`` for the next claim.
- ``lease_kept`` renews the lease from a thread while the step works, so a
  holder that dies (SIGKILL, OOM, a lost node) loses it within
  ``COSTAPP_PIPELINE_LEASE_S``; ``steps_to_requeue`` is what the reaper sends
  again.

Services never queue (import-linter): ``costapp.pipeline.tasks`` does.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from costapp.models import PipelineStep
from costapp.pipeline.change import Change

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    step: str
    owner: str
    change: Change
    version: int
    # When the oldest data merged into this claim arrived.
    since: datetime | None


def _row(name: str) -> PipelineStep:
    """The step's row, locked for this transaction (created on first use)."""
    PipelineStep.objects.get_or_create(name=name)
    return PipelineStep.objects.select_for_update().get(name=name)


def pipeline_request(
    *, steps: Iterable[str], change: Change, now: datetime | None = None
) -> list[str]:
    """Merge ``change`` into each step's pending work; returns the steps, for
    the caller to queue once this commits."""
    now = now or timezone.now()
    names = list(dict.fromkeys(steps))
    with transaction.atomic():
        for name in sorted(names):  # one lock order: no deadlock between two
            row = _row(name)
            row.pending = change.merge(Change.from_json(row.pending)).to_json()
            row.pending_since = min(filter(None, [row.pending_since, now]))
            row.requested = F("requested") + 1
            row.save(update_fields=["pending", "pending_since", "requested"])
    return names


def steps_queued(names: Iterable[str], *, now: datetime | None = None) -> None:
    """Record that a task was sent for each step (the reaper's grace starts)."""
    PipelineStep.objects.filter(name__in=list(names)).update(
        queued_at=now or timezone.now()
    )


def owner_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def lease_seconds() -> float:
    # Tasks run in-process (the embedded demo, tests): no other process can
    # take over, and no heartbeat thread is started, so the lease only has to
    # outlive the step.
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return float(settings.CELERY_TASK_TIME_LIMIT)
    return float(settings.COSTAPP_PIPELINE_LEASE_S)


def _held(row: PipelineStep, now: datetime) -> bool:
    return (
        bool(row.lease_owner) and row.lease_until is not None and row.lease_until > now
    )


def step_claim(
    name: str, *, exclusive: Iterable[str] = (), now: datetime | None = None
) -> Claim | None:
    """The step's pending work and its lease, or None: nothing to do, or a
    live holder is at it (it does what arrived meanwhile as a follow-up), or
    one of the ``exclusive`` steps is (its end queues this one again)."""
    now = now or timezone.now()
    with transaction.atomic():
        # Every row of the group locked, in one order: two claims of the
        # group never both see the other free.
        rows = {n: _row(n) for n in sorted({name, *exclusive})}
        row = rows[name]
        if any(_held(r, now) for r in rows.values()):
            return None
        # A lease that ran out: its holder died mid-step and its work is
        # still to do.
        orphan = Change.from_json(row.inflight) if row.lease_owner else None
        pending = Change.from_json(row.pending)
        if pending is None and orphan is None:
            if row.lease_owner:
                _lease_clear(row)
                row.save()
            return None
        change = pending.merge(orphan) if pending is not None else orphan
        assert change is not None
        arrived = min(
            filter(None, [row.pending_since, row.inflight_since if orphan else None]),
            default=None,
        )
        if orphan is not None:
            logger.warning(
                "pipeline step %s: lease of %s ran out at %s; its work (%s) is "
                "done again",
                name,
                row.lease_owner,
                row.lease_until,
                orphan.describe(),
            )
        owner = owner_name()
        row.inflight = change.to_json()
        row.inflight_since = arrived
        row.inflight_version = row.requested
        row.pending = None
        row.pending_since = None
        row.lease_owner = owner
        row.lease_until = now + timedelta(seconds=lease_seconds())
        row.started_at = now
        row.runs = F("runs") + 1
        row.save()
        return Claim(name, owner, change, row.inflight_version, arrived)


def _lease_clear(row: PipelineStep) -> None:
    row.lease_owner = ""
    row.lease_until = None
    row.inflight = None
    row.inflight_since = None


def step_finish(claim: Claim, *, now: datetime | None = None) -> bool:
    """Record the claim's version as consumed and free the lease. False when
    the lease was lost meanwhile (another worker redoes the work)."""
    now = now or timezone.now()
    with transaction.atomic():
        row = _row(claim.step)
        if row.lease_owner != claim.owner:
            logger.warning(
                "pipeline step %s finished after its lease passed to %s",
                claim.step,
                row.lease_owner or "nobody",
            )
            return False
        row.consumed = max(row.consumed, claim.version)
        row.last_success_at = now
        row.last_duration_s = (
            (now - row.started_at).total_seconds() if row.started_at else None
        )
        row.last_lag_s = (now - claim.since).total_seconds() if claim.since else None
        row.last_error = ""
        _lease_clear(row)
        row.save()
    return True


def step_fail(claim: Claim, error: str, *, now: datetime | None = None) -> None:
    """Put the claim's work back into ``pending`` (a later claim does it) and
    free the lease."""
    now = now or timezone.now()
    with transaction.atomic():
        row = _row(claim.step)
        if row.lease_owner != claim.owner:
            return
        row.pending = claim.change.merge(Change.from_json(row.pending)).to_json()
        row.pending_since = min(
            filter(None, [row.pending_since, claim.since, now]), default=now
        )
        row.failures = F("failures") + 1
        row.last_error = error[:5000]
        row.last_error_at = now
        _lease_clear(row)
        row.save()


def steps_behind(names: Iterable[str]) -> list[str]:
    """Those of ``names`` with work waiting for a claim."""
    return sorted(
        PipelineStep.objects.filter(
            name__in=list(names), pending__isnull=False
        ).values_list("name", flat=True)
    )


@contextmanager
def lease_kept(claim: Claim) -> Iterator[None]:
    """Renew the claim's lease every third of its length while the block runs
    (a thread with its own database connection). In-process (no broker) the
    lease is long enough already and no thread is started."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        yield
        return
    length = lease_seconds()
    done = threading.Event()

    def renew() -> None:
        try:
            while not done.wait(length / 3):
                kept = PipelineStep.objects.filter(
                    name=claim.step, lease_owner=claim.owner
                ).update(lease_until=timezone.now() + timedelta(seconds=length))
                if not kept:
                    logger.warning("pipeline step %s: lease lost", claim.step)
                    return
        except Exception:  # a thread edge: log, the lease then runs out
            logger.exception("pipeline step %s: lease renewal failed", claim.step)
        finally:
            connection.close()

    thread = threading.Thread(target=renew, name=f"lease-{claim.step}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=10)


def steps_to_requeue(*, now: datetime | None = None) -> list[str]:
    """Steps with work that nobody holds and no task sent lately: their task
    was lost (a broker restart) or their holder died. The reaper sends them
    again."""
    now = now or timezone.now()
    grace = now - timedelta(seconds=settings.COSTAPP_PIPELINE_REQUEUE_S)
    unheld = Q(lease_owner="") | Q(lease_until__lt=now)
    work = Q(pending__isnull=False) | (Q(inflight__isnull=False) & ~Q(lease_owner=""))
    quiet = Q(queued_at__isnull=True) | Q(queued_at__lt=grace)
    # A lease that ran out counts at once: its task is known to be gone.
    dead = ~Q(lease_owner="") & Q(lease_until__lt=now)
    return list(
        PipelineStep.objects.filter(unheld & work & (quiet | dead))
        .order_by("name")
        .values_list("name", flat=True)
    )


def leases_clear() -> int:
    """Free every lease: only for a process that knows no other runs (the
    embedded demo at start-up). Their work goes back to pending."""
    cleared = 0
    for name in PipelineStep.objects.exclude(lease_owner="").values_list(
        "name", flat=True
    ):
        with transaction.atomic():
            row = _row(name)
            orphan = Change.from_json(row.inflight)
            if orphan is not None:
                row.pending = orphan.merge(Change.from_json(row.pending)).to_json()
                row.pending_since = row.pending_since or row.inflight_since
            _lease_clear(row)
            row.save()
            cleared += 1
    return cleared
