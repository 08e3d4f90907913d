"""MIG layouts of one GPU for the MIG page: each chosen deployment alone on
every layout (one replica per instance), and layouts whose instances are
shared among deployments. Numbers only; ``tables.py`` writes them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from analytics.capacity.engine import Scenario
from analytics.capacity.errors import CapacityError
from analytics.capacity.mig import compare_mig_layouts, compare_shared_layouts
from analytics.errors import InvalidInput
from costapp.capacity import adapters
from costapp.capacity.selectors import Price, Today, deployment_today, gpu_hour_price
from costapp.models import Deployment


@dataclass(frozen=True)
class MigLayouts:
    deployment: str
    reports: tuple[Any, ...]  # analytics.capacity.mig.LayoutReport, one per layout
    cheapest: float | None  # the lowest cost per 1k requests among the layouts


@dataclass(frozen=True)
class MigComparison:
    gpu: str
    price: Price | None
    deployments: tuple[MigLayouts, ...]
    problems: tuple[str, ...]
    # Layouts whose instances serve several deployments (analytics'
    # LayoutReport per layout) and each deployment's peak req/s, to say how
    # many such GPUs its traffic needs.
    shared: tuple[Any, ...] = ()
    peaks: Mapping[str, float | None] = field(default_factory=dict)


def _on_mig(state: Today, gpu: str, price: Price | None) -> Scenario | None:
    """Today's scenario moved onto a whole MIG-capable ``gpu`` at ``price``;
    the layouts choose each instance's profile."""
    if state.scenario is None:
        return None
    return adapters.scenario_changed(
        state.scenario,
        {
            "gpu": gpu,
            "mig_profile": None,
            "tp": 1,
            # Each instance's profile is the layout's: never the pool the
            # deployment's own engine reported.
            "num_gpu_blocks_override": None,
            "gpu_hour_price": float(price.per_gpu_hour) if price else None,
        },
    )


def mig_comparison(
    gpu: str,
    layouts: Sequence[Sequence[str]],
    deployments: Sequence[Deployment],
    *,
    shared: Sequence[Sequence[tuple[str, str | None]]] = (),
    now: datetime | None = None,
) -> MigComparison:
    """Each deployment on each layout of ``gpu``: one replica per instance,
    the whole GPU paid for (idle slices are cost); and each ``shared`` layout,
    whose instances name the deployment they serve."""
    found: list[MigLayouts] = []
    problems: list[str] = []
    price = gpu_hour_price(gpu_type=gpu, day=(now or timezone.now()).date())
    if price is None:
        problems.append(f"no rate card for {gpu}: costs not computed")
    for deployment in deployments:
        state = deployment_today(deployment, now=now)
        base = _on_mig(state, gpu, price)
        if base is None:
            problems.extend(f"{deployment.name}: {p}" for p in state.problems)
            continue
        try:
            reports = compare_mig_layouts(gpu, [list(x) for x in layouts], base)
        except (CapacityError, InvalidInput) as exc:
            problems.append(f"{deployment.name}: {exc}")
            continue
        costs = [r.cost_per_1k_requests for r in reports if r.cost_per_1k_requests]
        found.append(
            MigLayouts(deployment.name, tuple(reports), min(costs) if costs else None)
        )
    scenarios: dict[str, Scenario] = {}
    peaks: dict[str, float | None] = {}
    names = sorted({n for layout in shared for _, n in layout if n})
    for deployment in Deployment.objects.filter(name__in=names).order_by("name"):
        state = deployment_today(deployment, now=now)
        base = _on_mig(state, gpu, price)
        if base is None:
            problems.extend(f"{deployment.name}: {p}" for p in state.problems)
            continue
        scenarios[deployment.name] = base
        peaks[deployment.name] = state.traffic.requests_per_s if state.traffic else None
    runnable = [
        list(layout) for layout in shared if all(n in scenarios for _, n in layout if n)
    ]
    reports_shared: tuple[Any, ...] = ()
    if runnable:
        try:
            reports_shared = compare_shared_layouts(
                gpu,
                runnable,
                scenarios,
                gpu_hour_price=float(price.per_gpu_hour) if price else None,
            )
        except (CapacityError, InvalidInput) as exc:
            problems.append(f"shared layouts: {exc}")
    return MigComparison(
        gpu, price, tuple(found), tuple(problems), reports_shared, peaks
    )
