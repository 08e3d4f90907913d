"""Running what follows new data in a test, as a command without a broker
does: request the steps, then drain them here."""

from __future__ import annotations

from collections.abc import Iterable

from costapp.pipeline.change import Change
from costapp.pipeline.runner import Executed, pipeline_drain
from costapp.pipeline.services import pipeline_request
from costapp.pipeline.steps import ENTRY_STEPS


def pipeline_run(
    steps: Iterable[str] = ENTRY_STEPS["both"], change: Change | None = None
) -> list[Executed]:
    names = pipeline_request(steps=steps, change=change or Change())
    return [e for e in pipeline_drain(names) if e.ran]
