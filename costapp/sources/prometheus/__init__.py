"""Prometheus (or Thanos Query, Mimir, VictoriaMetrics) as a telemetry source.

``targets`` says what is read, ``client`` speaks HTTP, ``reader`` reads raw samples in chunks, ``matrix``
decodes their JSON, ``records`` turns samples into hourly records (pure) and
``source`` is the ``Source`` the ingest pipeline runs.
"""

from __future__ import annotations

from costapp.sources.prometheus.client import (
    PrometheusClient,
    PrometheusConfig,
    QueryError,
)
from costapp.sources.prometheus.source import PrometheusSource
from costapp.sources.prometheus.targets import (
    Options,
    Target,
    options_from_params,
    plan_steps,
    targets_from_deployments,
)

__all__ = [
    "Options",
    "PrometheusClient",
    "PrometheusConfig",
    "PrometheusSource",
    "QueryError",
    "Target",
    "options_from_params",
    "plan_steps",
    "targets_from_deployments",
]
