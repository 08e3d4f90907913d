"""The Celery router for pipeline steps (named in CELERY_TASK_ROUTES): one
task name, ``pipeline_step_task``, goes to the queue of the step it runs."""

from __future__ import annotations

from typing import Any

from costapp.pipeline.steps import STEPS, queue_name

STEP_TASK = "costapp.pipeline.tasks.pipeline_step_task"


def route(
    name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **_: Any
) -> dict[str, str] | None:
    if name != STEP_TASK:
        return None
    step = args[0] if args else (kwargs or {}).get("name")
    if step not in STEPS:
        return None
    return {"queue": queue_name(step)}
