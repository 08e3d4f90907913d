"""Capacity per replica for the headroom kind: what one replica carries
within the SLA, per the capacity engine, derived once per deployment and day
of a recompute and cached across recomputes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from analytics.capacity import engine as capacity_engine
from analytics.capacity.errors import CapacityError
from analytics.errors import InvalidInput
from costapp.capacity import adapters
from costapp.capacity.selectors import deployment_today
from costapp.models import Calibration, Deployment


@dataclass(frozen=True)
class ReplicaCapacity:
    """What one replica carries within the SLA, per the capacity engine."""

    requests_per_s: float | None  # None: the engine could not say
    method: str  # roofline | calibrated
    label: str = ""
    problem: str = ""
    # GPUs one replica holds (TP x DP x the MIG instance's share of its GPU).
    gpus_per_replica: float | None = None


_CAPACITY_CACHE: dict[tuple[Any, ...], ReplicaCapacity] = {}
# Every deployment of a large fleet twice over (by day and by scenario).
_CAPACITY_CACHE_SIZE = 8192


def calibrations_key_read() -> tuple[Any, ...]:
    """The stored calibrations as a cache key: a new or replaced one changes
    every deployment's capacity."""
    return tuple(Calibration.objects.order_by("pk").values_list("pk", "created_at"))


def replica_capacity(
    deployment: Deployment, *, now: datetime, calibrations: tuple[Any, ...]
) -> ReplicaCapacity:
    """Max requests/s one replica sustains within the deployment's SLA, at
    the request shape of its busiest recent hour (``deployment_today``).

    Derived once per UTC day of ``now`` for the deployment as it stands (its
    fields and what the engine reported, ``_what_runs``) and the stored
    calibrations: reading what runs today
    takes a few queries per deployment, too many for a fleet of a thousand
    every refresh, and the busiest hour of the last seven days moves slowly.
    The engine itself runs once per scenario."""
    daily = (_what_runs(deployment), now.date(), calibrations)
    if daily in _CAPACITY_CACHE:
        return _CAPACITY_CACHE[daily]
    today = deployment_today(deployment, now=now)
    if today.scenario is None:
        found = ReplicaCapacity(None, "roofline", problem="; ".join(today.problems))
        _remember(daily, found)
        return found
    key = (repr(today.scenario), calibrations)
    if key in _CAPACITY_CACHE:
        _remember(daily, _CAPACITY_CACHE[key])
        return _CAPACITY_CACHE[key]
    cals = adapters.engine_calibrations(Calibration.objects.all())
    try:
        result = capacity_engine.evaluate(today.scenario, calibrations=cals)
    except (CapacityError, InvalidInput) as exc:
        found = ReplicaCapacity(None, "roofline", problem=str(exc))
    else:
        method = "roofline" if result.calibration.kind == "roofline" else "calibrated"
        if not result.starts:
            found = ReplicaCapacity(None, method, result.calibration.label,
                                    result.reason or "does not start")  # fmt: skip
        else:
            found = ReplicaCapacity(
                float(result.max_requests_per_s_within_sla),
                method,
                result.calibration.label,
                gpus_per_replica=float(result.gpu_share_per_replica),
            )
    _remember(key, found)
    _remember(daily, found)
    return found


def _what_runs(d: Deployment) -> str:
    """Everything of a deployment its capacity depends on, but its traffic."""
    try:
        config = sorted((d.discovery.cache_config or {}).items())
    except Deployment.discovery.RelatedObjectDoesNotExist:  # type: ignore[attr-defined]
        config = []
    return repr(
        (d.pk, d.engine, d.engine_version, d.model_name, d.gpu_type, d.gpu_count,
         d.tensor_parallel_size, d.mig_profile, d.slo_ttft_p95_ms, d.slo_itl_p95_ms,
         sorted((d.serving_args or {}).items()), config)
    )  # fmt: skip


def _remember(key: tuple[Any, ...], found: ReplicaCapacity) -> None:
    if len(_CAPACITY_CACHE) >= _CAPACITY_CACHE_SIZE:
        _CAPACITY_CACHE.clear()
    _CAPACITY_CACHE[key] = found
