"""Sending one outbox row: claim the attempt, notify, record the outcome.

``Channel.notify`` of healthchecks as a service. The claim is a conditional
UPDATE (pending -> sending, attempts + 1) that must change exactly one row, so
two workers handed the same id never both send. A worker killed after the send
and before the record leaves the row in "sending"; ``deliveries_reap`` puts it
back to pending and it is re-sent with the same webhook-id.

Every exception of an attempt ends it: a ``TransportError`` as the transport
says (retried or not, permanent or not); anything else (Django's
``BadHeaderError`` for a header holding a line break, a ``UnicodeError`` from
an address, a bug) as a permanent failure with its text. A row is never left
"sending" by a send that returned, so the reaper never re-queues it forever.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from costapp.alerts.payload import notification
from costapp.alerts.secrets import SecretError, config_decrypt, config_secrets, scrub
from costapp.alerts.transports import transport_for
from costapp.alerts.transports.base import TransportError, one_line
from costapp.models import Channel, Delivery
from costapp.roles import ADMIN

logger = logging.getLogger(__name__)

PERMANENT_FAILURES_TO_DISABLE = 3
PERMANENT_FAILURE_SPAN = timedelta(hours=24)
SENDING_TIMEOUT = timedelta(minutes=5)
RETRY_OVERDUE = timedelta(hours=2)  # longer than the longest backoff (1 h)


@dataclass(frozen=True)
class SendOutcome:
    status: str
    response_code: int | None
    error: str
    duration_ms: int
    retry: bool = False
    retry_after: float | None = None


def delivery_send(*, delivery_id: int, final: bool = False) -> SendOutcome | None:
    """One attempt. Returns None when another worker holds the row (or it is
    done); ``retry`` says the task should try again (unless ``final``)."""
    now = timezone.now()
    claimed = Delivery.objects.filter(pk=delivery_id, status=Delivery.PENDING).update(
        status=Delivery.SENDING, attempts=F("attempts") + 1, attempted_at=now
    )
    if claimed != 1:
        return None
    delivery = Delivery.objects.select_related("channel").get(pk=delivery_id)
    channel = delivery.channel
    if channel.disabled_at is not None and not delivery.is_test:
        # "Send test" still tries a disabled channel: that is how a fix is checked.
        return _record(delivery, Delivery.FAILED, None, "channel disabled", 0)
    try:
        config = config_decrypt(channel.config_encrypted)
    except SecretError as exc:
        return _record(delivery, Delivery.FAILED, None, str(exc), 0)
    secrets = config_secrets(config)
    events = list(delivery.events.select_related("rule").order_by("data_time", "pk"))
    started = time.monotonic()
    try:
        body = notification(delivery=delivery, events=events)
        code = transport_for(channel.kind)(config=config).notify(
            delivery=delivery, body=body
        )
    except Exception as exc:  # the transport edge: every failure is recorded
        if not isinstance(exc, TransportError):
            logger.exception("delivery %s: %s", delivery.pk, type(exc).__name__)
            exc = TransportError(f"{type(exc).__name__}: {exc}", permanent=True)
        took = int((time.monotonic() - started) * 1000)
        error = scrub(one_line(exc.message), secrets=secrets)
        retry = exc.retry and not final
        logger.warning(
            "delivery %s to channel %s failed: %s", delivery.pk, channel.pk, error
        )
        outcome = _record(
            delivery,
            Delivery.PENDING if retry else Delivery.FAILED,
            exc.status,
            error,
            took,
            retry=retry,
            retry_after=exc.retry_after,
        )
        _channel_failed(channel, exc=exc, error=error, now=now)
        return outcome
    took = int((time.monotonic() - started) * 1000)
    Channel.objects.filter(pk=channel.pk).update(
        permanent_failures=0, first_failure_at=None, last_error=""
    )
    return _record(delivery, Delivery.SENT, code, "", took)


def _record(
    delivery: Delivery,
    status: str,
    code: int | None,
    error: str,
    took: int,
    *,
    retry: bool = False,
    retry_after: float | None = None,
) -> SendOutcome:
    Delivery.objects.filter(pk=delivery.pk, status=Delivery.SENDING).update(
        status=status,
        response_code=code,
        error=error[:500],
        duration_ms=took,
        sent_at=timezone.now() if status == Delivery.SENT else None,
    )
    return SendOutcome(status, code, error, took, retry, retry_after)


def _channel_failed(
    channel: Channel, *, exc: TransportError, error: str, now: datetime
) -> None:
    with transaction.atomic():
        row = Channel.objects.select_for_update().get(pk=channel.pk)
        row.last_error = error[:500]
        reason = ""
        if exc.disable_now:
            reason = error
        elif exc.permanent:
            row.permanent_failures += 1
            row.first_failure_at = row.first_failure_at or now
            if (
                row.permanent_failures >= PERMANENT_FAILURES_TO_DISABLE
                and now - row.first_failure_at >= PERMANENT_FAILURE_SPAN
            ):
                reason = (
                    f"{row.permanent_failures} permanent failures since "
                    f"{row.first_failure_at:%Y-%m-%d %H:%M} UTC; last: {error}"
                )
        if reason and row.disabled_at is None:
            row.disabled_at = now
            row.disabled_reason = reason[:500]
            # robust: telling the admins never fails the attempt (or "send
            # test"): an error is logged.
            transaction.on_commit(lambda: _admins_tell(row.name, reason), robust=True)
        row.save()


def _admins_tell(name: str, reason: str) -> None:
    emails = list(
        User.objects.filter(groups__name=ADMIN, is_active=True)
        .exclude(email="")
        .values_list("email", flat=True)
    )
    if emails:
        send_mail(
            # A name stored before the name rule may hold a line break.
            f"[costapp] alert channel {one_line(name)} disabled",
            f"The alert channel {name!r} was disabled: {reason}\n"
            "Fix it and enable it again on the channel page.",
            None,
            emails,
            fail_silently=True,
        )


def deliveries_reap(*, now: datetime) -> list[int]:
    """Rows stuck in "sending" (a worker died mid-send) go back to pending;
    returns the ids to queue again (same webhook-id on the resend)."""
    cutoff = now - SENDING_TIMEOUT
    stuck = list(
        Delivery.objects.filter(
            status=Delivery.SENDING, attempted_at__lt=cutoff
        ).values_list("pk", flat=True)
    )
    Delivery.objects.filter(pk__in=stuck, status=Delivery.SENDING).update(
        status=Delivery.PENDING
    )
    # Pending rows never attempted (their queue message was lost), or whose
    # retry is overdue past the longest backoff; a row waiting out its
    # backoff is left alone.
    lost = Delivery.objects.filter(
        Q(attempts=0, created_at__lt=cutoff) | Q(attempted_at__lt=now - RETRY_OVERDUE),
        status=Delivery.PENDING,
        is_test=False,
    ).values_list("pk", flat=True)
    return sorted(set(stuck) | set(lost))
