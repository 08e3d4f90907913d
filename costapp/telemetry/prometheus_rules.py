"""Prometheus alerting rules for the fleet file's SLOs and the engines' KV cache.

Latency and KV pressure are for Prometheus to evaluate at its own pace (every
evaluation interval, on the raw series), not for costapp's hourly figures: so
costapp writes the rules and Prometheus runs them (`manage.py
prometheus_rules FLEET_FILE`, shipped as deploy/costapp_rules.yml for the demo
fleet and loaded by compose's Prometheus; docs/alerts.md).

An SLO "p95 TTFT at most 1,000 ms" is checked as what it means: more than 5%
of requests over the threshold. A histogram counts requests at its bucket
edges only, so the threshold is taken at the nearest edge at or below it (the
rule says which: counting the requests between that edge and the threshold
as over makes the rule stricter, never laxer). ITL's histogram has one sample
per output token after the first, so its rule is on inter-token intervals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import yaml

from costapp.sources.engine_buckets import VLLM_BUCKETS
from costapp.sources.engines import ENGINES
from costapp.sources.prometheus.unmatched import matchers_text
from costapp.sources.promql import selector_parse

RATE_WINDOW = "5m"
FOR = "10m"
KV_USAGE_HIGH = 0.9
# Engines whose default bucket edges are known (engines.py); another
# engine's SLO rule is not written, and the file says why.
BUCKETS = {"vllm": VLLM_BUCKETS}
SLO_METRICS = (
    ("ttft", "slo_ttft_p95_ms", "TTFT", "time to first token", "requests"),
    ("itl", "slo_itl_p95_ms", "ITL", "inter-token latency", "inter-token intervals"),
)


@dataclass(frozen=True)
class Target:
    """What a rule needs of a fleet-file deployment."""

    name: str
    team: str
    engine: str
    selector: str
    slo_ms: Mapping[str, float]  # "slo_ttft_p95_ms" -> 1000
    # A disaggregated deployment's SLOs are its decode engines' (they hold
    # the request from its first token): the selector and the prefill
    # engines' matcher negated; "" when PromQL cannot say it in one selector.
    decode_selector: str = ""


def targets(deployments: Iterable[Mapping[str, Any]]) -> list[Target]:
    """The fleet file's deployments (validated entries) that Prometheus scrapes."""
    out = []
    for entry in deployments:
        slo = entry.get("slo") or {}
        out.append(
            Target(
                name=str(entry["name"]),
                team=str(entry.get("team") or ""),
                engine=str(entry.get("engine") or "vllm"),
                selector=str(entry.get("prometheus_selector") or ""),
                decode_selector=_decode_selector(entry),
                slo_ms={
                    f"slo_{key}": float(slo[key])
                    for key in ("ttft_p95_ms", "itl_p95_ms")
                    if slo.get(key)
                },
            )
        )
    return [t for t in out if t.selector]


_NEGATED = {"=": "!=", "!=": "=", "=~": "!~", "!~": "=~"}


def _decode_selector(entry: Mapping[str, Any]) -> str:
    """The selector of a deployment's decode engines: all of its engines
    without a disaggregated deployment, those outside the prefill
    selector's one matcher with one, "" for a prefill selector of several
    matchers (not one matcher's negation: not expressible in a selector)."""
    selector = str(entry.get("prometheus_selector") or "")
    prefill = selector_parse(str(entry.get("prefill_selector") or ""))
    if not prefill:
        return selector
    if len(prefill) > 1:
        return ""
    (m,) = prefill
    return ",".join(
        p for p in (selector, matchers_text([replace(m, op=_NEGATED[m.op])])) if p
    )


def edge_at_or_below(edges: tuple[float, ...], seconds: float) -> float | None:
    below = [e for e in edges if e <= seconds + 1e-12]
    return max(below) if below else None


def le_label(edge: float) -> str:
    """An edge as the Python client writes ``le`` (repr of the float: "1.0")."""
    return repr(float(edge))


def _newest(engine: str, kind: str, field: str) -> str | None:
    """The newest name of a field in the engine's table (preference 0)."""
    table = ENGINES[engine]
    for name, roles in sorted(table.roles.items()):
        for role in roles:
            if (
                role.kind == kind
                and role.field == field
                and role.preference == 0
                and role.part in ("", "bucket")
            ):
                return name.removesuffix("_bucket")
    return None


def _labels(t: Target) -> dict[str, str]:
    labels = {"source": "costapp", "severity": "warning", "deployment": t.name}
    if t.team:
        labels["team"] = t.team
    return labels


def slo_rule(t: Target, metric: str) -> tuple[dict[str, Any] | None, str]:
    """The rule for one SLO of one deployment, or None and why not."""
    _, key, short, long, counted = next(m for m in SLO_METRICS if m[0] == metric)
    if key not in t.slo_ms:
        return None, ""
    if not t.decode_selector:
        return (
            None,
            f"{t.name}: {short} SLO not written: its prefill_selector has several "
            "matchers, and the decode engines (all but those) are not one PromQL "
            "selector; write the prefill engines as one matcher",
        )
    threshold_s = t.slo_ms[key] / 1000
    edges = BUCKETS.get(t.engine, {}).get(metric)
    base = _newest(t.engine, "histogram", metric)
    if not edges or not base:
        return (
            None,
            f"{t.name}: {short} SLO not written: no known bucket edges for {t.engine}",
        )
    edge = edge_at_or_below(edges, threshold_s)
    if edge is None:
        return (
            None,
            f"{t.name}: {short} SLO {t.slo_ms[key]:g} ms is below the first bucket edge",
        )
    sel = t.decode_selector
    count = f"sum(rate({base}_count{{{sel}}}[{RATE_WINDOW}]))"
    within = f'sum(rate({base}_bucket{{{sel},le="{le_label(edge)}"}}[{RATE_WINDOW}]))'
    return {
        "alert": f"Costapp{short}SLO",
        "expr": f"({count} - {within}) / {count} > 0.05",
        "for": FOR,
        "labels": _labels(t),
        "annotations": {
            "summary": (
                f"{t.name}: more than 5% of {counted} over {edge * 1000:g} ms of "
                f"{long} (SLO: p95 at most {t.slo_ms[key]:g} ms)"
            ),
            "description": (
                f"{{{{ $value | humanizePercentage }}}} of {counted} over "
                f"{edge * 1000:g} ms in the last {RATE_WINDOW}: the SLO's "
                f"{t.slo_ms[key]:g} ms taken at the histogram's bucket edge at "
                f"or below it."
            ),
        },
    }, ""


def kv_rules(t: Target) -> list[dict[str, Any]]:
    """Preemptions (vLLM preempts only when the KV cache is full) and a KV
    cache held above 90%: the capacity problems behind latency and cost."""
    rules = []
    preemptions = _newest(t.engine, "counter", "preemptions")
    if preemptions:
        rules.append(
            {
                "alert": "CostappPreempting",
                "expr": f"sum(increase({preemptions}{{{t.selector}}}[{FOR}])) > 0",
                "for": FOR,
                "labels": _labels(t),
                "annotations": {
                    "summary": f"{t.name} is preempting requests: its KV cache is full",
                    "description": "{{ $value | humanize }} preemptions in the last "
                    f"{FOR}; preempted requests are recomputed (cost) and wait (latency).",
                },
            }
        )
    usage = _newest(t.engine, "gauge", "kv_cache_usage")
    if usage:
        rules.append(
            {
                "alert": "CostappKVCacheHigh",
                "expr": (
                    f"max(avg_over_time({usage}{{{t.selector}}}[{FOR}])) "
                    f"> {KV_USAGE_HIGH}"
                ),
                "for": FOR,
                "labels": _labels(t),
                "annotations": {
                    "summary": f"{t.name}: KV cache above {KV_USAGE_HIGH:.0%} "
                    f"for {FOR}",
                    "description": "{{ $value | humanizePercentage }} of the KV "
                    "cache in use on the fullest replica, averaged over "
                    f"{FOR}: preemptions follow when it fills.",
                },
            }
        )
    return rules


def rules_document(deployments: Iterable[Mapping[str, Any]], *, source: str) -> str:
    """The rule file's text: one group per deployment, in the file's order."""
    groups, skipped = [], []
    for t in targets(deployments):
        rules = []
        for metric, *_ in SLO_METRICS:
            rule, why = slo_rule(t, metric)
            if rule:
                rules.append(rule)
            elif why:
                skipped.append(why)
        rules.extend(kv_rules(t))
        if rules:
            groups.append({"name": f"costapp-{t.name}", "rules": rules})
    header = [
        f"# Generated by `manage.py prometheus_rules {source}`: do not edit by hand.",
        "# SLOs at a bucket edge, preemptions and KV cache (costapp/telemetry/",
        '# prometheus_rules.py; docs/alerts.md, "Latency and KV cache in Prometheus").',
        *(f"# Not written: {why}." for why in skipped),
    ]
    body = yaml.safe_dump(
        {"groups": groups}, sort_keys=False, width=1000, allow_unicode=True
    )
    return "\n".join(header) + "\n" + body
