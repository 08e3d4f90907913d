"""A tolerant parser for the Prometheus text exposition format (/metrics).

Real exporters emit lines strict parsers reject: dcgm-exporter prints
``DCGM_FI_DEV_VGPU_PER_PROCESS_UTILIZATION{...} ERROR - FAILED TO CONVERT TO
STRING``. One bad line must not hide the other few hundred, so bad lines are
skipped and reported with their number and the reason.

The snapshot functions route names through the same tables
(``costapp.sources.engines``) as the Prometheus adapter, so the tests can hold
those tables against real exporters' captured scrapes. The product never reads
/metrics itself (it asks Prometheus), hence this lives with the tests.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from costapp.sources.engines import (
    DCGM,
    DeviceKey,
    EngineTable,
    counter_field,
    device_key,
    keeps_rank,
    replica_key,
)

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LINE = re.compile(
    rf"^(?P<name>{_NAME})(?:\{{(?P<labels>.*)\}})?\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class Malformed:
    line_no: int
    text: str
    reason: str


@dataclass(frozen=True)
class Exposition:
    samples: list[Sample]
    types: dict[str, str]
    malformed: list[Malformed]


def _unescape(value: str) -> str:
    return re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], value)


def _labels(text: str) -> dict[str, str] | None:
    out: dict[str, str] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            return None
        out[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return out


def _value(text: str) -> float:
    lowered = text.lower()
    if lowered in {"+inf", "inf"}:
        return math.inf
    if lowered == "-inf":
        return -math.inf
    if lowered == "nan":
        return math.nan
    return float(text)


def parse_exposition(text: str) -> Exposition:
    samples: list[Sample] = []
    types: dict[str, str] = {}
    malformed: list[Malformed] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        m = _LINE.match(line)
        if not m:
            malformed.append(Malformed(line_no, raw, "not `name{labels} value`"))
            continue
        labels = _labels(m.group("labels") or "")
        if labels is None:
            malformed.append(Malformed(line_no, raw, "unparsable label set"))
            continue
        try:
            value = _value(m.group("value"))
        except ValueError:
            malformed.append(
                Malformed(line_no, raw, f"value {m.group('value')!r} is not a number")
            )
            continue
        ts = int(m.group("ts")) if m.group("ts") else None
        samples.append(Sample(m.group("name"), labels, value, ts))
    # A line like `x{...} ERROR - FAILED TO CONVERT TO STRING` matches nothing
    # above (three tokens after the labels): it lands in malformed.
    return Exposition(samples, types, malformed)


@dataclass(frozen=True)
class HistogramSnapshot:
    bounds: tuple[float | None, ...]  # None is +Inf
    cumulative_counts: tuple[float, ...]
    total_sum: float = 0.0
    total_count: float = 0.0


@dataclass(frozen=True)
class EngineSnapshot:
    """Cumulative values of one scrape, in our fields (counters since start)."""

    counters: dict[str, float]
    gauges: dict[str, float]
    histograms: dict[str, HistogramSnapshot]
    cache_config: dict[str, str]
    replicas: int
    names_found: tuple[str, ...]


def _preferred(
    table: EngineTable, samples: list[Sample]
) -> list[tuple[Sample, str, int]]:
    """(sample, field, preference) keeping per replica only the newest name."""
    rows: list[tuple[Sample, str, int]] = []
    best: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    for s in samples:
        if not keeps_rank(s.labels, table=table):
            continue
        for role in table.roles_of(s.name):
            key = (role.kind + ":" + role.field, replica_key(s.labels, table=table))
            best[key] = min(best.get(key, role.preference), role.preference)
            rows.append((s, role.kind + ":" + role.field, role.preference))
    return [
        (s, f, p)
        for s, f, p in rows
        if best[(f, replica_key(s.labels, table=table))] == p
    ]


def engine_snapshot(expo: Exposition, table: EngineTable) -> EngineSnapshot:
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    cache_config: dict[str, str] = {}
    replicas: set[tuple[tuple[str, str], ...]] = set()
    for s, kind_field, _ in _preferred(table, expo.samples):
        kind, name = kind_field.split(":", 1)
        role = next(r for r in table.roles_of(s.name) if r.field == name)
        if kind == "counter":
            stored = counter_field(role, s.labels)
            if stored is not None:
                counters[stored] = counters.get(stored, 0.0) + s.value * role.scale
        elif kind == "gauge":
            gauges[name] = gauges.get(name, 0.0) + s.value * role.scale
            if name == table.up_field:
                replicas.add(replica_key(s.labels, table=table))
        elif kind == "info":
            cache_config = dict(sorted(s.labels.items()))
        elif role.part == "bucket":
            le = _value(s.labels.get("le", "+Inf"))
            per = buckets.setdefault(name, {})
            per[le] = per.get(le, 0.0) + s.value
        elif role.part == "sum":
            sums[name] = sums.get(name, 0.0) + s.value
        elif role.part == "count":
            counts[name] = counts.get(name, 0.0) + s.value
    histograms = {
        metric: HistogramSnapshot(
            bounds=tuple(None if math.isinf(b) else b for b in sorted(per)),
            cumulative_counts=tuple(per[b] for b in sorted(per)),
            total_sum=sums.get(metric, 0.0),
            total_count=counts.get(metric, 0.0),
        )
        for metric, per in buckets.items()
    }
    found = tuple(sorted({s.name for s in expo.samples} & set(table.roles)))
    return EngineSnapshot(
        counters, gauges, histograms, cache_config, len(replicas), found
    )


@dataclass(frozen=True)
class DeviceSnapshot:
    key: DeviceKey
    values: dict[str, float] = field(default_factory=dict)


def device_snapshots(expo: Exposition) -> list[DeviceSnapshot]:
    """One entry per GPU or MIG instance with the DCGM fields it reports."""
    devices: dict[DeviceKey, dict[str, float]] = {}
    for s in expo.samples:
        mapped = DCGM.get(s.name)
        if mapped is None:
            continue
        key = device_key(s.labels)
        devices.setdefault(key, {})[mapped.field] = s.value * mapped.scale
    return [DeviceSnapshot(k, v) for k, v in devices.items()]
