"""Why a selector matched nothing, said with the labels the series carry:
after an upgrade to dcgm-exporter 4.6.0-4.8.3 a fleet file's
``Hostname="node-1"`` matches nothing (the label is ``hostname`` now), and
"GPU-hours unknown" alone does not tell the user why. Likewise a
disaggregated deployment's prefill selector that leaves one pool empty."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from costapp.sources.engines import DCGM_LABEL_RENAMES, ENGINES, replica_key
from costapp.sources.prometheus.targets import Target
from costapp.sources.promql import (
    Matcher,
    labels_match,
    selector_parse,
    selector_problem,
)

# Label matchers (PromQL text, no braces) -> the DCGM series they match.
Lookup = Callable[[str], list[dict[str, str]]]


def unmatched_reason(selector: str, lookup: Lookup) -> str:
    """The first that applies: a label the exporter renamed (the selector
    rewritten matches), labels no series carries, values none has."""
    matchers = selector_parse(selector)
    for i, m in enumerate(matchers):
        other = DCGM_LABEL_RENAMES.get(m.label)
        if other is None:
            continue
        renamed = [*matchers[:i], Matcher(other, m.op, m.value), *matchers[i + 1 :]]
        if lookup(matchers_text(renamed)):
            return (
                f"dcgm_selector {selector} matched no series; the exporter's "
                f"series carry {other} (not {m.label}): write {matchers_text(renamed)}"
            )
    carried = lookup("")
    labels = sorted({k for s in carried for k in s} - {"__name__"})
    if not labels:
        return f"dcgm_selector {selector}: Prometheus holds no DCGM series"
    missing = [m.label for m in matchers if m.label not in labels]
    if missing:
        return (
            f"dcgm_selector {selector} matched no series; the exporter's series "
            f"carry no {', '.join(missing)} (they carry {', '.join(labels)})"
        )
    values = {
        m.label: sorted({s[m.label] for s in carried if m.label in s})[:5]
        for m in matchers
    }
    return (
        f"dcgm_selector {selector} matched no series; values the exporter's "
        "series carry: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in values.items())
    )


def prefill_split_reason(target: Target, found: Sequence[dict[str, str]]) -> str:
    """Why the target's ``prefill_selector`` does not split the engines its
    selector found (``found``: the series' labels) into a prefill and a
    decode pool (each request would then be counted by no pool or by both),
    or "" when it does, or when the target has one pool."""
    if not target.prefill_selector:
        return ""
    problem = selector_problem(target.prefill_selector)
    if problem is not None:
        return f"prefill_selector={problem}"
    table = ENGINES[target.engine]
    engines = [
        dict(key)
        for key in sorted(
            {
                replica_key(
                    {k: v for k, v in s.items() if k != "__name__"}, table=table
                )
                for s in found
                # The config info series carries the config, not an engine's
                # labels alone.
                if any(r.kind != "info" for r in table.roles_of(s.get("__name__", "")))
            }
        )
    ]
    matchers = selector_parse(target.prefill_selector)
    prefill = sum(labels_match(matchers, e) for e in engines)
    if 0 < prefill < len(engines):
        return ""
    labels = sorted({k for e in engines for k in e})
    values = {
        m.label: sorted({e.get(m.label, "") for e in engines})[:5] for m in matchers
    }
    return (
        f"prefill_selector {{{target.prefill_selector}}} matched "
        f"{'all' if prefill else 'none'} of the {len(engines)} engines "
        f"{{{target.selector}}} reads, so there is no "
        f"{'decode' if prefill else 'prefill'} pool to count requests and "
        f"tokens once: not read. The engines carry {', '.join(labels)}; values: "
        + "; ".join(f"{k}: {', '.join(repr(x) for x in v)}" for k, v in values.items())
    )


def matchers_text(matchers: Sequence[Matcher]) -> str:
    """Matchers back to PromQL text, values quoted as PromQL reads them."""
    return ",".join(f"{m.label}{m.op}{_promql_string(m.value)}" for m in matchers)


def _promql_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
