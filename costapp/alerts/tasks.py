"""Thin Celery tasks of alerts, routed to the "alerts" queue by
CELERY_TASK_ROUTES so a long backfill never delays a notification."""

from __future__ import annotations

import random

from celery import shared_task
from django.utils import timezone

from costapp.alerts.delivery import deliveries_reap, delivery_send

BACKOFF_BASE_S = 30.0
BACKOFF_CAP_S = 3600.0
MAX_RETRIES = 6


def backoff_s(retries: int, *, rng: random.Random | None = None) -> float:
    """Exponential backoff with jitter: 30 s, 60 s, 120 s ... capped at 1 h,
    each scaled by a random factor in [0.5, 1) so receivers that failed
    together do not get retried together."""
    rng = rng or random.SystemRandom()
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**retries) * rng.uniform(0.5, 1.0)


@shared_task(bind=True, acks_late=True, max_retries=MAX_RETRIES)
def delivery_send_task(self, delivery_id: int) -> str | None:  # type: ignore[no-untyped-def]
    # In-process (no broker) a retry would sleep in the request: one attempt.
    final = self.request.is_eager or self.request.retries >= MAX_RETRIES
    outcome = delivery_send(delivery_id=delivery_id, final=final)
    if outcome is None:
        return None
    if outcome.retry:
        countdown = (
            outcome.retry_after
            if outcome.retry_after is not None
            else backoff_s(self.request.retries)
        )
        raise self.retry(countdown=countdown)
    return outcome.status


def deliveries_queue(ids: list[int]) -> None:
    for pk in ids:
        delivery_send_task.delay_on_commit(pk)


@shared_task
def deliveries_reap_task() -> int:
    ids = deliveries_reap(now=timezone.now())
    deliveries_queue(ids)
    return len(ids)
