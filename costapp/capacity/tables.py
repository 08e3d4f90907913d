"""The capacity pages' text: what-if cells and deltas, MIG rows, search rows.

Numbers come from ``whatif.py``; this module only writes them as people read
them, through ``costapp/formatting.py`` (a missing figure is ``MISSING``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from analytics.capacity.binding import BINDING, BINDING_SHORT
from analytics.capacity.engine import Result
from analytics.capacity.refusals import RejectedShare
from costapp.capacity import adapters
from costapp.capacity.mig_layouts import MigComparison
from costapp.capacity.whatif import SearchOutcome, WhatIf
from costapp.formatting import MISSING, money, number


@dataclass(frozen=True)
class Metric:
    field: str
    label: str
    unit: str
    scale: float = 1.0
    digits: int = 0
    better: str = "higher"  # or "lower"
    money: bool = False


METRICS: tuple[Metric, ...] = (
    Metric(
        "kv_bytes_per_token",
        "KV bytes per token (per GPU)",
        "KiB",
        1 / 1024,
        1,
        "lower",
    ),
    Metric("kv_cache_memory_bytes", "KV pool memory", "GiB", 1 / 1024**3, 2),
    Metric("kv_cache_tokens", "KV pool tokens", "tokens"),
    Metric("num_gpu_blocks", "KV blocks", "blocks"),
    Metric("max_concurrency", "Max concurrency (this request shape)", "seqs", 1, 1),
    Metric("batch_size", "Batch within the ITL SLA", "seqs"),
    Metric("decode_step_ms", "Decode step at that batch", "ms", 1, 2, "lower"),
    Metric("itl_at_percentile_ms", "ITL at the SLA percentile", "ms", 1, 1, "lower"),
    Metric("ttft_ms", "TTFT without queueing", "ms", 1, 0, "lower"),
    Metric("throughput_tokens_per_s", "Output tokens/s per replica", "tok/s", 1, 0),
    Metric(
        "max_requests_per_s_within_sla",
        "Requests/s per replica within SLA",
        "req/s",
        1,
        2,
    ),
    Metric("replicas", "Replicas for the target (all)", "", 1, 0, "lower"),
    Metric("gpus_needed", "GPUs needed (all replicas)", "GPU", 1, 2, "lower"),
    Metric("cost_per_hour", "Cost per hour (all replicas)", "/h", 1, 2, "lower", True),
    Metric(
        "cost_per_1k_requests", "Cost per 1k requests", "/1k req", 1, 4, "lower", True
    ),
    Metric("cost_per_1m_tokens", "Cost per 1M tokens", "/1M tok", 1, 4, "lower", True),
)


@dataclass(frozen=True)
class Cell:
    text: str
    delta: str = ""
    tone: str = ""  # good, bad or ""


# The engine's Result holds 0 for these where a column cannot serve (its int
# and float fields have no "none"); 0 replicas would read as "needs none".
UNSERVED_MISSING = frozenset({"replicas", "gpus_needed"})


def _value(result: Result, metric: Metric) -> float | None:
    if metric.field in UNSERVED_MISSING and not result.feasible:
        return None
    raw = getattr(result, metric.field)
    if raw is None:
        return None
    value = float(raw)
    return value if math.isfinite(value) else None


def _format(value: float | None, metric: Metric, currency: str) -> str:
    if value is None:
        return MISSING
    if metric.money:
        return money(value * metric.scale, currency, places=metric.digits) + (
            metric.unit
        )
    text = number(value * metric.scale, metric.digits)
    return f"{text} {metric.unit}".strip()


def _delta(base: float | None, value: float | None, metric: Metric) -> Cell:
    if base is None or value is None:
        return Cell("")
    diff = (value - base) * metric.scale
    if abs(diff) < 0.5 * 10 ** (-metric.digits):
        return Cell("=", "", "")
    share = (value - base) / base if base else None
    # Below 1% a whole percent reads "-0%": one decimal then.
    if share is None:
        rel = ""
    elif abs(share) >= 0.01:
        rel = f" ({share:+.0%})"
    else:
        rel = f" ({share:+.1%})"
    better = (diff > 0) == (metric.better == "higher")
    return Cell(f"{diff:+,.{metric.digits}f}{rel}", "", "good" if better else "bad")


def _cells(
    result: Result | None, base: Result | None, currency: str
) -> tuple[Cell, ...]:
    cells = []
    for metric in METRICS:
        if result is None:
            cells.append(Cell(MISSING))
            continue
        value = _value(result, metric)
        text = _format(value, metric, currency)
        if base is None or base is result:
            cells.append(Cell(text))
            continue
        delta = _delta(_value(base, metric), value, metric)
        cells.append(Cell(text, delta.text, delta.tone))
    return tuple(cells)


@dataclass(frozen=True)
class WhatIfTable:
    columns: tuple[tuple[Cell, ...], ...]  # per column; () for a refused input
    rows: tuple[tuple[Metric, tuple[Cell, ...]], ...]  # per metric, columns with cells
    blocks_check: str | None = None  # vLLM's reported KV blocks against the model's


def whatif_table(whatif: WhatIf) -> WhatIfTable:
    """Every metric of every column as text, variants with their delta to today."""
    base = whatif.base
    columns = tuple(
        _cells(c.result, base, whatif.currency) if c.scenario is not None else ()
        for c in whatif.columns
    )
    rows = tuple(
        (metric, tuple(cells[i] for cells in columns if cells))
        for i, metric in enumerate(METRICS)
    )
    check = None
    observed = whatif.today.observed_blocks
    modelled = whatif.modelled_blocks
    if observed and modelled:
        off = (modelled - observed) / observed
        source = whatif.today.pool_source
        reported = (
            f"vLLM reported num_gpu_blocks={observed:,}"
            if source == "num_gpu_blocks"
            else f"the engine reported {source} ({observed:,} blocks of today's size)"
        )
        check = (
            f"{reported}: today runs on that pool. "
            f"The memory model predicts {modelled:,} for today's settings "
            f"({off:+.1%}); a variant that changes what the pool was profiled with "
            "(GPU, dtypes, TP, memory share, batch limits) uses the model's figure"
        )
        if "num_gpu_blocks" in whatif.today.engine_figures:
            check += f"; {CIRCULAR_BLOCKS}"
    return WhatIfTable(columns, rows, check)


@dataclass(frozen=True)
class ReplicaSizing:
    """Today's one replica figure, with its arithmetic and what ran."""

    needed: str
    running: str
    arithmetic: str


def _count(value: float, digits: int = 1) -> str:
    """Replicas and GPUs: whole where whole (MIG slices and means are not)."""
    return number(value, 0 if abs(value - round(value)) < 1e-9 else digits)


def replica_sizing(whatif: WhatIf) -> ReplicaSizing | None:
    """Replicas the peak hour needs (the engine's figure for today) beside the
    replicas that were up in that hour, in replicas and GPUs."""
    base, traffic = whatif.base, whatif.today.traffic
    if base is None or traffic is None:
        return None
    per_replica = base.gpu_share_per_replica
    gpus = f"{_count(per_replica, 2)} GPU per replica"
    running = (
        MISSING
        if traffic.replicas is None
        else f"{_count(traffic.replicas)} ({_count(traffic.replicas * per_replica)}"
        " GPUs) up that hour, telemetry"
    )
    rate = base.max_requests_per_s_within_sla
    if not base.feasible or rate <= 0:
        return ReplicaSizing(MISSING, running, base.reason or "today does not serve")
    raw = traffic.requests_per_s / rate
    return ReplicaSizing(
        f"{base.replicas:,} ({_count(base.gpus_needed)} GPUs)",
        running,
        f"{number(traffic.requests_per_s, 2)} req/s at the peak hour ÷ "
        f"{number(rate, 2)} req/s per replica within the SLA = {number(raw, 2)} → "
        f"{base.replicas:,} replicas at {gpus}",
    )


@dataclass(frozen=True)
class PriceCell:
    text: str
    basis: str
    source: str
    unconfirmed: bool


def price_cells(whatif: WhatIf) -> tuple[PriceCell, ...]:
    """Each column's $ per GPU-hour with the rate card it rests on, so a
    variant's saving on another GPU never hides an unconfirmed price."""
    out = []
    for column in whatif.columns:
        price = column.price
        if price is None:
            out.append(PriceCell(MISSING, "no rate card", "", False))
            continue
        out.append(
            PriceCell(
                money(price.per_gpu_hour, price.currency, places=4) + "/GPU-h",
                price.basis,
                price.source,
                price.unconfirmed,
            )
        )
    return tuple(out)


def binding_text(result: Result | None) -> str:
    """What limits this column's batch, so a cliff between columns explains
    itself (the engine's ``binding``)."""
    if result is None:
        return MISSING
    if not result.starts:
        return "vLLM refuses to start: see Runs?"
    if not result.feasible:
        return "not served within the SLA: see Runs?"
    return BINDING.get(result.binding, result.binding)


CIRCULAR_BLOCKS = (
    "circular: this num_gpu_blocks was generated from the capacity engine (the "
    "demo), so agreement with it checks nothing"
)


def rejected_cells(
    whatif: WhatIf, rejected: Mapping[str, RejectedShare | None] | None
) -> tuple[tuple[str, str], ...]:
    """Per column (text, tone): requests its max_model_len rejects, from the
    prompt histogram as a bound between bucket edges; missing without one."""
    out = []
    for column in whatif.columns:
        if not rejected:
            out.append(("no prompt-length histogram", "muted"))
            continue
        share = rejected.get(column.key)
        if share is None:
            out.append((MISSING, ""))
        elif share.rejected_at_most <= 0 and share.truncated_at_most <= 0:
            out.append((f"none (max_model_len {share.max_model_len:,})", ""))
        else:
            out.append(
                (
                    f"max_model_len {share.max_model_len:,}: at least "
                    f"{share.rejected_at_least:.1%}, at most "
                    f"{share.rejected_at_most:.1%} of requests rejected (prompt too "
                    f"long, HTTP 400); a further {share.truncated_at_least:.1%} to "
                    f"{share.truncated_at_most:.1%} cut at max_model_len "
                    "(finish_reason=length)",
                    "bad" if share.rejected_at_least > 0 else "warn",
                )
            )
    return tuple(out)


@dataclass(frozen=True)
class MigRow:
    deployment: str
    layout: str
    valid: bool
    reason: str | None
    placements: str
    instances: tuple[str, ...]
    requests_per_s: str
    idle_slices: int
    cost_per_hour: str
    cost_per_1k_requests: str
    best: bool = False
    status: str = "serves"  # serves | does not serve | refused


def _layout_text(layout: Sequence[str]) -> str:
    """``3g.40gb + 2x2g.20gb``: a run of one profile is written once."""
    runs: list[list[Any]] = []
    for profile in layout:
        if runs and runs[-1][0] == profile:
            runs[-1][1] += 1
        else:
            runs.append([profile, 1])
    return " + ".join(p if n == 1 else f"{n}x{p}" for p, n in runs)


def _status(report: Any) -> str:
    """NVIDIA's placement rules first, then whether every instance runs its
    deployment within the SLA: a placement no instance can serve from is
    not "valid" in any sense a reader cares about."""
    if not report.valid:
        return "refused"
    return "serves" if report.serves else "does not serve"


def _slot_lines(report: Any) -> tuple[str, ...]:
    """Instances that say the same (seven 1g slices refused for the same
    reason) are one line naming their placements."""
    said: dict[str, list[str]] = {}
    for slot in report.slots:
        r = slot.result
        if slot.deployment is None:
            text = "idle: no deployment"
        elif r is not None and slot.serves:
            text = (
                f"{r.max_requests_per_s_within_sla:,.2f} req/s, batch "
                f"{r.batch_size} (limit: {BINDING_SHORT.get(r.binding, r.binding)}), "
                f"{r.kv_cache_tokens:,} KV tokens"
            )
        else:
            text = f"does not run ({slot.reason})"
        if slot.deployment and len({s.deployment for s in report.slots}) > 1:
            text = f"{slot.deployment}: {text}"
        p = slot.placement
        said.setdefault(text, []).append(f"{p.profile}@{p.start}")
    return tuple(f"{', '.join(where)}: {text}" for text, where in said.items())


def mig_rows(comparison: MigComparison) -> list[MigRow]:
    """One row per deployment and layout; the cheapest per deployment marked."""
    price = comparison.price
    currency = price.currency if price else ""
    rows: list[MigRow] = []
    for found in comparison.deployments:
        for report in found.reports:
            rows.append(
                MigRow(
                    deployment=found.deployment,
                    layout=_layout_text(report.layout),
                    valid=report.valid,
                    reason=report.reason,
                    placements=", ".join(
                        f"{p.profile}@{p.start}" for p in report.placements
                    ),
                    instances=_slot_lines(report),
                    requests_per_s=f"{report.requests_per_s:,.2f}"
                    if report.serves
                    else MISSING,
                    idle_slices=report.idle_compute_slices,
                    cost_per_hour=(
                        money(report.gpu_cost_per_hour, currency)
                        if report.valid and report.gpu_cost_per_hour is not None
                        else MISSING
                    ),
                    cost_per_1k_requests=(
                        money(report.cost_per_1k_requests, currency, places=4)
                        if report.cost_per_1k_requests is not None
                        else MISSING
                    ),
                    best=found.cheapest is not None
                    and report.cost_per_1k_requests == found.cheapest,
                    status=_status(report),
                )
            )
    return rows


@dataclass(frozen=True)
class MigSharedRow:
    layout: str
    status: str
    reason: str | None
    instances: tuple[str, ...]
    deployments: tuple[str, ...]  # per deployment: what it gets and needs
    idle_slices: int
    idle_cost_per_hour: str  # the stranded slices' share of the GPU's price
    cost_per_hour: str
    best: bool


def _assigned_text(report: Any) -> str:
    """``3g.40gb:code-assist + 2x2g.20gb:moderation``."""
    names = [
        f"{s.placement.profile}:{s.deployment}" if s.deployment else s.placement.profile
        for s in report.slots
    ]
    return _layout_text(names) if names else _layout_text(report.layout)


def mig_shared_rows(comparison: MigComparison) -> list[MigSharedRow]:
    """Layouts whose instances serve several deployments: each deployment's
    req/s within the SLA and $ per 1k (the GPU's price split by the compute
    slices it holds), how many such GPUs its peak hour needs, and the slices
    no deployment uses priced as idle dollars."""
    price = comparison.price
    currency = price.currency if price else ""
    slices = adapters.mig_slices_of(comparison.gpu) or 7
    rows = []
    for report in comparison.shared:
        lines = []
        for name, rate in sorted(report.requests_per_s_by_deployment.items()):
            cost = report.cost_per_1k_by_deployment.get(name)
            peak = comparison.peaks.get(name)
            text = f"{name}: {rate:,.2f} req/s within the SLA"
            if cost is not None:
                text += f", {money(cost, currency, places=4)}/1k req"
            if peak is not None and rate > 0:
                text += (
                    f"; its peak hour ({peak:,.2f} req/s) needs "
                    f"{math.ceil(peak / rate)} GPUs laid out this way"
                )
            lines.append(text)
        idle = report.idle_compute_slices if report.valid else slices
        gpu_price = report.gpu_cost_per_hour
        rows.append(
            MigSharedRow(
                layout=_assigned_text(report),
                status=_status(report),
                reason=report.reason,
                instances=_slot_lines(report),
                deployments=tuple(lines),
                idle_slices=idle,
                idle_cost_per_hour=MISSING
                if gpu_price is None or not report.valid
                else money(gpu_price * idle / slices, currency) + "/h",
                cost_per_hour=MISSING
                if gpu_price is None or not report.valid
                else money(gpu_price, currency) + "/h",
                best=report.rank == 1,
            )
        )
    return rows


def _fmt(value: Any, digits: int) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return MISSING
    return f"{number:,.{digits}f}" if math.isfinite(number) else MISSING


def _config_text(row: Mapping[str, Any], keys: Sequence[str]) -> str:
    parts = []
    for key in keys:
        value = row.get(key)
        if key == "mig_profile" and (value is None or value != value):
            value = "whole GPU"
        elif isinstance(value, float) and value.is_integer():
            value = int(value)  # a frame column of ints comes back as floats
        parts.append(f"{key}={value}")
    return ", ".join(parts)


def _unit(text: str, unit: str) -> str:
    return text if text == MISSING else f"{text} {unit}"


def _money(value: Any, currency: str, places: int) -> str:
    try:
        amount = float(value)
    except (TypeError, ValueError):
        return MISSING
    return money(amount, currency, places=places) if math.isfinite(amount) else MISSING


def search_rows(
    frame: Any, keys: Sequence[str], limit: int, currency: str = "USD"
) -> list[dict[str, str]]:
    """Ranked or refused search rows as display strings (money in ``currency``)."""
    out: list[dict[str, str]] = []
    if frame is None or not len(frame):
        return out
    for rank, (_, row) in enumerate(frame.head(limit).iterrows(), start=1):
        out.append(
            {
                "rank": str(rank),
                "config": _config_text(row, keys),
                "cost_per_1k_requests": _money(
                    row.get("cost_per_1k_requests"), currency, 4
                ),
                "cost_per_1m_tokens": _money(
                    row.get("cost_per_1m_tokens"), currency, 4
                ),
                "p95_latency_s": _unit(_fmt(row.get("p95_latency_s"), 2), "s"),
                "itl_ms": _unit(_fmt(row.get("itl_at_percentile_ms"), 1), "ms"),
                "ttft_ms": _unit(_fmt(row.get("ttft_ms"), 0), "ms"),
                "gpus": _fmt(row.get("gpus_needed"), 2),
                "rps": _fmt(row.get("max_requests_per_s_within_sla"), 2),
                "kv_tokens": _fmt(row.get("kv_cache_tokens"), 0),
                "limit": BINDING_SHORT.get(str(row.get("binding")), ""),
                "score": _fmt(row.get("score"), 4),
                "calibration": str(row.get("calibration") or ""),
                "reason": str(row.get("reason") or ""),
            }
        )
    return out


def pareto_series(
    outcome: SearchOutcome, keys: Sequence[str]
) -> tuple[list[float], list[float], list[str], list[float], list[float], str]:
    ranked = outcome.ranked.dropna(subset=["cost_per_1k_requests"])
    front = outcome.pareto
    return (
        [float(v) for v in ranked["cost_per_1k_requests"]],
        [float(v) for v in ranked["p95_latency_s"]],
        [_config_text(r, keys) for _, r in ranked.iterrows()],
        [float(v) for v in front["cost_per_1k_requests"]],
        [float(v) for v in front["p95_latency_s"]],
        outcome.currency,
    )


def simulation_rows(result: Any) -> list[tuple[str, list[str]]]:
    """The simulation's percentiles as (row, [p50, p95, p99]) text; a percentile
    of no samples (no request finished) is missing, not "nan ms"."""

    def ms(value: float, digits: int) -> str:
        return MISSING if not math.isfinite(value) else f"{number(value, digits)} ms"

    return [
        (
            label,
            [ms(getattr(result, f"{key}_p{q}_ms"), digits) for q in (50, 95, 99)],
        )
        for label, key, digits in (
            ("TTFT", "ttft", 1),
            ("ITL", "itl", 1),
            ("End to end", "e2e", 0),
        )
    ]
