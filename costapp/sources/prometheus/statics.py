"""An engine's static gauges read once at discovery: the settings it runs with
that it exports as values rather than as an info series's labels (SGLang's
``context_len`` is the served max_model_len, ``max_total_num_tokens`` its KV
pool in tokens). Their role in the engine table is ``info`` with the setting's
name as its field: never stored hourly, kept with the engine's configuration.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from costapp.sources.engines import EngineTable
from costapp.sources.prometheus.client import PrometheusClient
from costapp.sources.prometheus.reader import _selector

# vLLM's info series carries its configuration as labels, read as they are.
LABELLED = "cache_config"


def static_names(table: EngineTable, found: Iterable[str]) -> dict[str, str]:
    """Series name -> setting, for the static gauges among ``found``."""
    out = {}
    for name in found:
        for role in table.roles.get(name, ()):
            if role.kind == "info" and role.field != LABELLED:
                out[name] = role.field
    return out


def engine_statics(
    client: PrometheusClient,
    table: EngineTable,
    found: Iterable[str],
    selector: str,
    *,
    start_s: int,
    end_s: int,
) -> dict[str, str]:
    """Each static setting's value at ``end_s`` (the last in the window), the
    lowest over ranks and replicas, as the engine aggregates them itself
    (SGLang's ``multiprocess_mode="min"``); as text, like labels."""
    names = static_names(table, found)
    if not names:
        return {}
    window = max(60, end_s - start_s)
    promql = (
        f"min by (__name__) (last_over_time({_selector(sorted(names), selector)}"
        f"[{window}s]))"
    )
    values: dict[str, str] = {}
    for row in client.query(promql, end_s * 1000):
        setting = names.get(row.get("metric", {}).get("__name__", ""))
        try:
            number = float(row["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if setting and math.isfinite(number) and number > 0:
            values.setdefault(setting, str(int(number)))
    return values
