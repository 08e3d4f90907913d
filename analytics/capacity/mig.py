"""MIG layouts: placement rules per NVIDIA's MIG user guide, and layout comparison.

A GPU has 7 compute slices and 8 memory slices. Each profile may start only at
certain memory-slice indices and spans a fixed number of them; instances may not
overlap in memory, and their compute slices add up to at most 7.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from analytics.capacity.catalog import GpuSpec, MigProfile, get_gpu
from analytics.capacity.engine import Result, Scenario, evaluate
from analytics.capacity.errors import Infeasible, InvalidInput


@dataclass(frozen=True)
class Placement:
    profile: str
    start: int
    memory_slices: tuple[int, ...]
    compute_slices: int


def place_layout(gpu: GpuSpec | str, layout: Sequence[str]) -> tuple[Placement, ...]:
    """Find valid start slices for every instance, or raise Infeasible saying why."""
    spec = gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
    if not spec.mig_profiles:
        raise InvalidInput("gpu", spec.name, "does not support MIG")
    if not layout:
        raise InvalidInput("layout", list(layout), "must name at least one profile")
    profiles = [spec.mig_profile(name) for name in layout]
    compute = sum(p.compute_slices for p in profiles)
    if compute > 7:
        raise Infeasible(
            f"layout {list(layout)} needs {compute} compute slices; {spec.name} has 7",
            field="layout",
        )
    memory = sum(p.memory_slices for p in profiles)
    if memory > 8:
        raise Infeasible(
            f"layout {list(layout)} needs {memory} memory slices; {spec.name} has 8",
            field="layout",
        )
    # Largest first: they have the fewest allowed starts.
    order = sorted(range(len(profiles)), key=lambda i: -profiles[i].memory_slices)
    chosen: dict[int, int] = {}

    def fits(profile: MigProfile, start: int, used: set[int]) -> bool:
        span = set(range(start, start + profile.memory_slices))
        return max(span) < 8 and not (span & used)

    def backtrack(k: int, used: set[int]) -> bool:
        if k == len(order):
            return True
        i = order[k]
        for start in profiles[i].starts:
            if fits(profiles[i], start, used):
                chosen[i] = start
                span = set(range(start, start + profiles[i].memory_slices))
                if backtrack(k + 1, used | span):
                    return True
        return False

    if not backtrack(0, set()):
        raise Infeasible(
            f"layout {list(layout)} has no valid placement on {spec.name}: the allowed "
            "start slices of these profiles overlap (see NVIDIA MIG user guide, "
            "profile placements)",
            field="layout",
        )
    return tuple(
        Placement(
            profile=profiles[i].name,
            start=chosen[i],
            memory_slices=tuple(
                range(chosen[i], chosen[i] + profiles[i].memory_slices)
            ),
            compute_slices=profiles[i].compute_slices,
        )
        for i in range(len(profiles))
    )


def is_valid_layout(gpu: GpuSpec | str, layout: Sequence[str]) -> bool:
    try:
        place_layout(gpu, layout)
    except Infeasible:
        return False
    return True


@dataclass(frozen=True)
class LayoutReport:
    layout: tuple[str, ...]
    valid: bool
    reason: str | None
    placements: tuple[Placement, ...]
    instances: tuple[Result, ...]
    requests_per_s: float
    idle_compute_slices: int
    gpu_cost_per_hour: float | None
    cost_per_1k_requests: float | None


def compare_mig_layouts(
    gpu: str,
    layouts: Sequence[Sequence[str]],
    deployment: Scenario,
) -> tuple[LayoutReport, ...]:
    """Each layout runs one replica of ``deployment`` per instance.

    The whole GPU is paid for, so unused slices are idle cost: cost per 1k requests
    divides the GPU's hourly price by what all instances serve within the SLA.
    """
    reports = []
    price = deployment.gpu_hour_price
    for layout in layouts:
        try:
            placements = place_layout(gpu, layout)
        except Infeasible as exc:
            reports.append(
                LayoutReport(
                    tuple(layout), False, exc.reason, (), (), 0.0, 7, price, None
                )
            )
            continue
        results = tuple(
            evaluate(replace(deployment, gpu=gpu, mig_profile=p.profile, tp=1))
            for p in placements
        )
        rps = sum(r.max_requests_per_s_within_sla for r in results if r.feasible)
        idle = 7 - sum(p.compute_slices for p in placements)
        cost = price / (rps * 3600) * 1000 if price is not None and rps > 0 else None
        reports.append(
            LayoutReport(
                tuple(layout), True, None, placements, results, rps, idle, price, cost
            )
        )
    return tuple(reports)
