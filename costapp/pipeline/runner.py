"""Running a step: claim, do, record, request what follows.

``step_execute`` is the body of ``pipeline_step_task`` and of the in-process
drain the commands use; it never queues (the caller sends the next steps'
tasks, or drains them here).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from costapp.pipeline.services import (
    lease_kept,
    pipeline_request,
    step_claim,
    step_fail,
    step_finish,
    steps_behind,
)
from costapp.pipeline.steps import STEPS, Outcome, downstream

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Executed:
    step: str
    ran: bool  # False: nothing to do, or a live holder is at it
    outcome: Outcome = field(default_factory=Outcome)
    seconds: float = 0.0
    requested: tuple[str, ...] = ()  # steps to queue next
    again: tuple[str, ...] = ()  # steps with work waiting: queue them again


def step_execute(name: str) -> Executed:
    step = STEPS[name]
    claim = step_claim(name, exclusive=step.exclusive)
    if claim is None:
        return Executed(name, ran=False)
    started = time.perf_counter()
    try:
        with lease_kept(claim):
            outcome = step.run(claim.change, timezone.now())
    except BaseException as exc:  # task edge: the work goes back to pending
        step_fail(claim, f"{type(exc).__name__}: {exc}")
        logger.exception("pipeline step %s failed (%s)", name, claim.change.describe())
        raise
    with transaction.atomic():
        kept = step_finish(claim)
        nexts = (
            pipeline_request(steps=step.after, change=claim.change)
            if kept and step.after
            else []
        )
    seconds = time.perf_counter() - started
    logger.info(
        "pipeline step %s done in %.2f s (%s): %d rows",
        name,
        seconds,
        claim.change.describe(),
        outcome.rows,
    )
    return Executed(
        name,
        ran=True,
        outcome=outcome,
        seconds=seconds,
        requested=tuple(nexts),
        # Work that arrived while it ran, and steps that waited for its lease.
        again=tuple(steps_behind([name, *step.exclusive])),
    )


def pipeline_drain(names: Iterable[str]) -> list[Executed]:
    """Run ``names`` and every step they lead to here, in order, until none
    has work left (what the commands do without a broker)."""
    done: list[Executed] = []
    todo = downstream(names)
    order = list(STEPS)
    while todo:
        name = todo.pop(0)
        result = step_execute(name)
        done.append(result)
        for nxt in [*result.requested, *result.again]:
            if nxt not in todo:
                todo.append(nxt)
        todo.sort(key=order.index)
    return done
