"""Why a DCGM selector matched nothing, said with the labels the exporter's
series carry: after an upgrade to dcgm-exporter 4.6.0-4.8.3 a fleet file's
``Hostname="node-1"`` matches nothing (the label is ``hostname`` now), and
"GPU-hours unknown" alone does not tell the user why."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from costapp.sources.engines import DCGM_LABEL_RENAMES
from costapp.sources.promql import Matcher, selector_parse

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


def matchers_text(matchers: Sequence[Matcher]) -> str:
    """Matchers back to PromQL text, values quoted as PromQL reads them."""
    return ",".join(f"{m.label}{m.op}{_promql_string(m.value)}" for m in matchers)


def _promql_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'
