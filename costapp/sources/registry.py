"""Which adapter serves an ingest run, by the run's ``source`` name.

The one wiring module of ``costapp.sources`` allowed to read the ORM: it turns
a stored run (and, for Prometheus, the fleet) into an adapter's arguments, so
the adapters themselves never touch models (import-linter holds them to it).
Importing an adapter reaches no outside system (boto3 is imported when a
client is first needed), so a deployment without AWS credentials or
Prometheus still starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from costapp.models import Deployment, IngestRun
from costapp.sources.base import Source, SourceError
from costapp.sources.cost_explorer import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_METRICS,
    CostExplorerSource,
)
from costapp.sources.demo import DemoSource
from costapp.sources.prometheus import (
    PrometheusConfig,
    PrometheusSource,
    options_from_params,
    targets_from_deployments,
)


def _demo(run: IngestRun) -> DemoSource:
    """params seed, days; the demo ends at the run's window end."""
    params = run.params or {}
    end = run.window_end
    days = int(params.get("days") or max(1, (end - run.window_start).days))
    return DemoSource(seed=int(params.get("seed", 7)), days=days, end=end)


def _cost_explorer(run: IngestRun) -> CostExplorerSource:
    params = run.params or {}
    accounts = params.get("account_ids") or ([run.target] if run.target else [])
    return CostExplorerSource(
        account_ids=accounts,
        granularity=params.get("granularity", "DAILY"),
        group_by=params.get("group_by")
        or ({"Type": "DIMENSION", "Key": "USAGE_TYPE"},),
        filter=params.get("filter"),
        metrics=params.get("metrics") or DEFAULT_METRICS,
        max_attempts=int(params.get("max_attempts", DEFAULT_MAX_ATTEMPTS)),
    )


def _prometheus(run: IngestRun) -> PrometheusSource:
    """run.params: {"deployments": [names] (default: all with a selector),
    "dcgm_selectors": {name: matchers} (default: each deployment's own
    ``dcgm_selector``), and any ``Options`` field}; never a "config"."""
    params = dict(run.params or {})
    if "config" in params:
        # The URL, credentials and bearer token come from PROMETHEUS_* settings
        # only: a stored run naming its own URL would have the configured
        # token sent wherever that URL points.
        raise SourceError(
            f"config={params['config']!r:.80}: a run may not carry Prometheus "
            "settings of its own (URL, credentials); they come from the "
            "PROMETHEUS_* settings",
            permanent=True,
        )
    qs = Deployment.objects.all()
    names = params.get("deployments")
    if names:
        qs = qs.filter(name__in=names)
        missing = set(names) - set(qs.values_list("name", flat=True))
        if missing:
            raise SourceError(
                f"deployments not in the fleet: {', '.join(sorted(missing))}",
                permanent=True,
            )
    else:
        qs = qs.exclude(prometheus_selector="")
    config = PrometheusConfig.from_settings()
    return PrometheusSource(
        targets=targets_from_deployments(list(qs), params.get("dcgm_selectors")),
        config=config,
        options=options_from_params(params),
    )


# No "focus": a FOCUS run is read whole and checked before anything is written,
# so run_execute hands it to costs.services.focus_import_execute, not to ingest.
ADAPTERS: dict[str, Callable[[IngestRun], Any]] = {
    "demo": _demo,
    "cost_explorer": _cost_explorer,
    "prometheus": _prometheus,
}


def source_for_run(run: IngestRun) -> Source:
    try:
        build = ADAPTERS[run.source]
    except KeyError:
        raise ValueError(
            f"ingest run {run.pk}: unknown source {run.source!r}"
        ) from None
    source: Source = build(run)
    return source
