"""What a command does after it stored data: it runs the pipeline's steps
here (no broker: the embedded demo, a laptop) or queues them for the
workers, and says which."""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings
from django.core.management.base import OutputWrapper

from costapp.alerts.tasks import deliveries_queue
from costapp.pipeline.runner import Executed, pipeline_drain
from costapp.pipeline.steps import STEPS, downstream
from costapp.pipeline.tasks import pipeline_queue


def followups_run_or_queue(steps: Sequence[str], out: OutputWrapper) -> None:
    if not steps:
        out.write("pipeline: nothing stored, nothing to recompute")
        return
    chain = ", ".join(STEPS[s].title for s in downstream(steps))
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        pipeline_queue(steps)
        out.write(f"pipeline: queued for the workers ({chain})")
        return
    done = [e for e in pipeline_drain(steps) if e.ran]
    deliveries_queue([d for e in done for d in e.outcome.deliveries])
    ran = ", ".join(
        f"{STEPS[e.step].title}: {_what(e)} in {e.seconds:.1f} s" for e in done
    )
    out.write(f"pipeline: ran here, no broker configured ({ran or 'nothing to do'})")


def _what(done: Executed) -> str:
    if done.step == "alerts":
        return f"{len(done.outcome.deliveries)} notification(s)"
    return f"{done.outcome.rows} rows"
