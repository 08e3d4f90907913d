"""The fleet file: pools and deployments described in YAML kept in git.

Loading is all-or-nothing: every entry is validated first, every mistake is
reported at once (file, entry, field, value), and only a clean file writes.
Deployments the file no longer lists are reported, never deleted silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Field

from analytics.errors import shown
from costapp.fleet.validation import (
    ALL_TEAMS,
    deployment_problems,
    holiday_problems,
    pool_problems,
)
from costapp.models import Deployment, Pool, TeamHoliday
from costapp.yamlfile import FileProblems, YamlFileError, yaml_file_load

POOL_FIELDS = (
    "name",
    "instance_type",
    "region",
    "gpu_type",
    "gpus_per_node",
    "allocation_key",
    "cost_rules",
)
DEPLOYMENT_FIELDS = (
    "name",
    "team",
    "engine",
    "engine_version",
    "model",
    "gpu_type",
    "gpu_count",
    "tensor_parallel_size",
    "mig_profile",
    "instance_type",
    "region",
    "account_id",
    "prometheus_selector",
    "dcgm_selector",
    "prefill_selector",
    "cost_rules",
    "pool",
    "slo",
    "target_utilisation",
    "serving",
)


@dataclass(frozen=True)
class FleetLoadResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    # In the database but not in the file: kept unless pruned.
    missing: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    pools_created: list[str] = field(default_factory=list)
    pools_updated: list[str] = field(default_factory=list)
    holidays: int = 0  # holiday entries now stored (the file replaces them all)


def _entry_label(section: str, index: int, entry: Any) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return f"{section}[{index}] ({name})" if name else f"{section}[{index}]"


def fleet_file_read(path: Path) -> dict[str, Any]:
    """The parsed fleet file, through the one bounded YAML reader (size, UTF-8,
    depth, aliases: costapp/yamlfile.py); every refusal is a FileProblems."""
    try:
        data = yaml_file_load(path, name=path.name)
    except YamlFileError as exc:
        raise FileProblems(str(path), [str(exc)]) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FileProblems(
            str(path), ["the top level must be a mapping with pools and deployments"]
        )
    return data


# The file's name of a column where it differs (the rest are the same).
FILE_FIELD = {
    "model_name": "model",
    "slo_ttft_p95_ms": "slo.ttft_p95_ms",
    "slo_itl_p95_ms": "slo.itl_p95_ms",
    "serving_args": "serving",
}


def _column_problems(
    values: Mapping[str, Any], model: type[Pool] | type[Deployment]
) -> list[tuple[str, str]]:
    """Values the rules above accept that their column cannot hold (a
    GPU count of 10^20, a 40-character account id): PostgreSQL would refuse
    the write with a DataError. Run once an entry has no other problem."""
    problems = []
    for column, value in values.items():
        if value is None or column in ("pool", "cost_rules"):
            continue
        field = model._meta.get_field(column)
        try:
            if isinstance(field, Field):
                field.run_validators(value)
        except ValidationError as exc:
            problems.append(
                (FILE_FIELD.get(column, column), f"{shown(value)}: {exc.messages[0]}")
            )
    return problems


def fleet_validate(data: Mapping[str, Any], *, name: str) -> list[str]:
    """Every problem of a parsed fleet file, each naming file, entry and field."""
    errors: list[str] = []
    for key in data:
        # ``alerts`` is read by costapp.alerts.fleetfile (fleet/ never imports alerts/).
        if key not in ("pools", "deployments", "holidays", "alerts"):
            errors.append(
                f"{name}: unknown top-level key {shown(key)} "
                "(pools, deployments, holidays, alerts)"
            )
    pools = data.get("pools") or []
    deployments = data.get("deployments") or []
    holidays = data.get("holidays") or []
    for section, value in (
        ("pools", pools), ("deployments", deployments), ("holidays", holidays)
    ):  # fmt: skip
        if not isinstance(value, list):
            errors.append(f"{name}: {section} must be a list")
    if errors:
        return errors

    pool_gpus: dict[str, str] = {}
    for i, entry in enumerate(pools):
        label = _entry_label("pools", i, entry)
        if not isinstance(entry, Mapping):
            errors.append(f"{name}: {label}: must be a mapping")
            continue
        for key in entry:
            if key not in POOL_FIELDS:
                errors.append(f"{name}: {label}: unknown field {shown(key)}")
        problems = pool_problems(entry) or _column_problems(_pool_values(entry), Pool)
        for fld, message in problems:
            errors.append(f"{name}: {label}: {fld} {message}")
        pool_name = entry.get("name")
        if isinstance(pool_name, str):
            if pool_name in pool_gpus:
                errors.append(f"{name}: {label}: name {pool_name!r} is a duplicate")
            pool_gpus[pool_name] = str(entry.get("gpu_type"))

    seen: dict[str, int] = {}
    for i, entry in enumerate(deployments):
        label = _entry_label("deployments", i, entry)
        if not isinstance(entry, Mapping):
            errors.append(f"{name}: {label}: must be a mapping")
            continue
        for key in entry:
            if key not in DEPLOYMENT_FIELDS:
                errors.append(f"{name}: {label}: unknown field {shown(key)}")
        problems = deployment_problems(entry, pools=pool_gpus) or _column_problems(
            _deployment_values({**entry, "pool": None}, {}), Deployment
        )
        for fld, message in problems:
            errors.append(f"{name}: {label}: {fld} {message}")
        dep_name = entry.get("name")
        if isinstance(dep_name, str):
            if dep_name in seen:
                errors.append(
                    f"{name}: {label}: name {dep_name!r} is a duplicate of "
                    f"deployments[{seen[dep_name]}]"
                )
            else:
                seen[dep_name] = i

    teams = {
        str(e["team"])
        for e in deployments
        if isinstance(e, Mapping) and isinstance(e.get("team"), str) and e["team"]
    }
    for i, entry in enumerate(holidays):
        label = f"holidays[{i}]"
        if not isinstance(entry, Mapping):
            errors.append(f"{name}: {label}: must be a mapping")
            continue
        for fld, message in holiday_problems(entry, teams=teams):
            errors.append(f"{name}: {label}: {fld} {message}")
    return errors


def _holiday_rows(entries: list[Mapping[str, Any]]) -> list[TeamHoliday]:
    rows = []
    for entry in entries:
        day = entry.get("day")
        rows.append(
            TeamHoliday(
                team=entry.get("team", ALL_TEAMS),
                country=entry.get("country") or "",
                subdiv=str(entry.get("subdiv") or ""),
                day=date.fromisoformat(day) if isinstance(day, str) else day,
                name=entry.get("name") or "",
            )
        )
    return rows


def _pool_values(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "instance_type": entry["instance_type"],
        "region": entry.get("region") or "us-east-1",
        "gpu_type": entry["gpu_type"],
        "gpus_per_node": entry.get("gpus_per_node", 8),
        "allocation_key": entry.get("allocation_key", "gpu_hours"),
        "cost_rules": entry.get("cost_rules") or [],
    }


def _deployment_values(
    entry: Mapping[str, Any], pools: Mapping[str, Pool]
) -> dict[str, Any]:
    slo = entry.get("slo") or {}
    return {
        "team": entry.get("team") or "",
        "engine": entry.get("engine", "vllm"),
        "engine_version": str(entry.get("engine_version") or ""),
        "model_name": entry["model"],
        "gpu_type": entry["gpu_type"],
        "gpu_count": entry.get("gpu_count", 1),
        "tensor_parallel_size": entry.get("tensor_parallel_size", 1),
        "mig_profile": entry.get("mig_profile") or "",
        "instance_type": entry.get("instance_type") or "",
        "region": entry.get("region") or "us-east-1",
        "account_id": str(entry.get("account_id") or ""),
        "prometheus_selector": entry.get("prometheus_selector") or "",
        "dcgm_selector": entry.get("dcgm_selector") or "",
        "prefill_selector": entry.get("prefill_selector") or "",
        "cost_rules": entry.get("cost_rules") or [],
        "pool": pools[entry["pool"]] if entry.get("pool") else None,
        "slo_ttft_p95_ms": slo.get("ttft_p95_ms"),
        "slo_itl_p95_ms": slo.get("itl_p95_ms"),
        "target_utilisation": float(entry.get("target_utilisation", 0.7)),
        "serving_args": dict(entry.get("serving") or {}),
    }


def _save_if_changed(obj: Any, values: Mapping[str, Any]) -> bool:
    # Saving only real changes keeps updated_at meaningful and reloads idempotent.
    changed = [k for k, v in values.items() if getattr(obj, k) != v]
    for k in changed:
        setattr(obj, k, values[k])
    if changed:
        obj.save()
    return bool(changed)


@transaction.atomic
def fleet_load(
    *, path: str | Path, prune: bool = False, data: Mapping[str, Any] | None = None
) -> FleetLoadResult:
    """Validate the whole fleet file, then upsert pools and deployments by name
    and replace the holidays. ``data``: the file already parsed (and adjusted,
    as the demo does with its holiday); ``path`` then only names it."""
    path = Path(path)
    if data is None:
        data = fleet_file_read(path)
    errors = fleet_validate(data, name=path.name)
    if errors:
        raise FileProblems(str(path), errors)

    result = FleetLoadResult()
    pools: dict[str, Pool] = {}
    for entry in data.get("pools") or []:
        values = _pool_values(entry)
        pool = Pool.objects.filter(name=entry["name"]).first()
        if pool is None:
            pool = Pool.objects.create(name=entry["name"], **values)
            result.pools_created.append(pool.name)
        elif _save_if_changed(pool, values):
            result.pools_updated.append(pool.name)
        pools[pool.name] = pool

    names = []
    for entry in data.get("deployments") or []:
        values = _deployment_values(entry, pools)
        names.append(entry["name"])
        deployment = Deployment.objects.filter(name=entry["name"]).first()
        if deployment is None:
            Deployment.objects.create(name=entry["name"], **values)
            result.created.append(entry["name"])
        elif _save_if_changed(deployment, values):
            result.updated.append(entry["name"])
        else:
            result.unchanged.append(entry["name"])

    # The file is the calendar: its holidays replace every stored one.
    TeamHoliday.objects.all().delete()
    holidays = TeamHoliday.objects.bulk_create(
        _holiday_rows(data.get("holidays") or [])
    )
    result = replace(result, holidays=len(holidays))

    stale = Deployment.objects.exclude(name__in=names).order_by("name")
    result.missing.extend(stale.values_list("name", flat=True))
    if prune and result.missing:
        stale.delete()
        result.pruned.extend(result.missing)
    return result
