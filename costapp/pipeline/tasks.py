"""Thin Celery tasks of the pipeline: one task runs one step.

``pipeline_step_task(name)`` is routed by step (``costapp.pipeline.routing``):
the live steps to the live queue, the rollups to the ingest queue, the alert
evaluation to the alerts queue. A task whose step is held by a live lease
returns at once: the holder does what arrived meanwhile as its follow-up.
The beat's ``pipeline-reap`` sends again what no lease holds and no recent
task was sent for (a task the broker lost, a worker that died).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from celery import shared_task
from django.conf import settings

from costapp.alerts.tasks import deliveries_queue
from costapp.pipeline.change import Change
from costapp.pipeline.runner import step_execute
from costapp.pipeline.services import pipeline_request, steps_queued, steps_to_requeue
from costapp.pipeline.steps import ENTRY_STEPS, STEPS

logger = logging.getLogger(__name__)


def pipeline_queue(names: Iterable[str]) -> list[str]:
    """Send one task per step once the caller's transaction commits (a
    worker never claims work it cannot see yet)."""
    unique = list(dict.fromkeys(names))
    if unique:
        steps_queued(unique)
    for name in unique:
        pipeline_step_task.delay_on_commit(name)
    return unique


@shared_task(acks_late=True)
def pipeline_step_task(name: str) -> str:
    if name not in STEPS:
        logger.error("pipeline step %r is not known", name)
        return "unknown"
    result = step_execute(name)
    if result.outcome.deliveries:
        deliveries_queue(list(result.outcome.deliveries))
    pipeline_queue([*result.requested, *result.again])
    return f"{result.outcome.rows} rows" if result.ran else "nothing to do"


@shared_task
def pipeline_reap_task() -> list[str]:
    """Beat: send again the steps with work nobody holds (figures trail the
    data by at most this period plus the lease after a crash)."""
    names = steps_to_requeue()
    if names:
        logger.warning("pipeline: sending again %s", ", ".join(names))
    return pipeline_queue(names)


@shared_task
def pipeline_full_task() -> list[str]:
    """Beat (daily): every figure from the first period, for what no ingest
    announces (a rate card typed into the admin, a calibration)."""
    return pipeline_queue(pipeline_request(steps=ENTRY_STEPS["fleet"], change=Change()))


@shared_task
def alerts_evaluate_task() -> list[str]:
    """Beat: evaluate every rule on the clock, as well as after each
    recompute: staleness and closing periods need time, not data."""
    return pipeline_queue(pipeline_request(steps=["alerts"], change=Change()))


def alerts_evaluate_queue(steps: list[str]) -> bool:
    """ "Evaluate now": send the evaluation; True when it ran here (no
    broker: the task ran in this process before this returns)."""
    pipeline_queue(steps)
    return bool(settings.CELERY_TASK_ALWAYS_EAGER)
