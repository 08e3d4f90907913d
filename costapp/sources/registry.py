"""Which adapter serves an ingest run, by the run's ``source`` name.

Each adapter module exposes ``source_from_run(run) -> Source``; imports are
lazy so a deployment without boto3 credentials or Prometheus still starts.
"""

from __future__ import annotations

from importlib import import_module

from costapp.models import IngestRun
from costapp.sources.base import Source

ADAPTERS = {
    "demo": "costapp.sources.demo",
    "cost_explorer": "costapp.sources.cost_explorer",
    "focus": "costapp.sources.focus",
    "prometheus": "costapp.sources.prometheus",
}


def source_for_run(run: IngestRun) -> Source:
    try:
        module_name = ADAPTERS[run.source]
    except KeyError:
        raise ValueError(
            f"ingest run {run.pk}: unknown source {run.source!r}"
        ) from None
    module = import_module(module_name)
    source: Source = module.source_from_run(run)
    return source
