"""MIG layouts: placement rules per NVIDIA's MIG user guide, and layout comparison.

A GPU has 7 compute slices (an A30 has 4: ``GpuSpec.mig_slices``, from its own
profiles) and 8 memory slices. Each profile may start only at certain memory-slice
indices and spans a fixed number of them; instances may not overlap in memory, and
their compute slices add up to at most the GPU's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from analytics.capacity.calibration_types import Calibration
from analytics.capacity.catalog import GpuSpec, MigProfile, get_gpu
from analytics.capacity.engine import Result, Scenario, evaluate
from analytics.capacity.errors import Infeasible, Refused
from analytics.errors import InvalidInput


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
    if compute > spec.mig_slices:
        raise Infeasible(
            f"layout {list(layout)} needs {compute} compute slices; "
            f"{spec.name} has {spec.mig_slices}",
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
class InstanceReport:
    """One placed instance: what it is assigned, and whether it runs it."""

    placement: Placement
    deployment: str | None
    result: Result | None
    serves: bool
    reason: str | None


@dataclass(frozen=True)
class LayoutReport:
    """A layout on one GPU.

    ``valid`` is NVIDIA's placement rules only (unchanged meaning); ``serves`` says
    every assigned instance runs its deployment within the SLA, with the reason per
    instance in ``slots``. Only layouts that serve get a cost per 1k requests and a
    ``rank`` (1 = cheapest). Unassigned instances count as idle slices.
    ``instances`` holds the assigned instances' results (aligned with
    ``placements`` when every instance is assigned, as in ``compare_mig_layouts``).
    """

    layout: tuple[str, ...]
    valid: bool
    reason: str | None
    placements: tuple[Placement, ...]
    instances: tuple[Result, ...]
    requests_per_s: float
    idle_compute_slices: int
    gpu_cost_per_hour: float | None
    cost_per_1k_requests: float | None
    serves: bool = False
    slots: tuple[InstanceReport, ...] = ()
    rank: int | None = None
    requests_per_s_by_deployment: Mapping[str, float] = field(default_factory=dict)
    cost_per_1k_by_deployment: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def placement_valid(self) -> bool:
        return self.valid


def _run_instance(
    placement: Placement,
    name: str | None,
    deployments: Mapping[str, Scenario],
    gpu: str,
    calibrations: Sequence[Calibration],
) -> InstanceReport:
    if name is None:
        return InstanceReport(placement, None, None, True, "idle: no deployment")
    if name not in deployments:
        raise InvalidInput(
            "layout", name, f"unknown deployment; known: {sorted(deployments)}"
        )
    # An instance's pool is sized for its profile, whatever pool the
    # deployment reported where it runs today.
    scenario = replace(
        deployments[name],
        gpu=gpu,
        mig_profile=placement.profile,
        tp=1,
        num_gpu_blocks_override=None,
    )
    try:
        result = evaluate(scenario, calibrations=calibrations)
    except Refused as exc:
        return InstanceReport(placement, name, None, False, exc.reason)
    if result.feasible:
        return InstanceReport(placement, name, result, True, None)
    verb = "does not start" if not result.starts else "does not serve"
    return InstanceReport(
        placement,
        name,
        result,
        False,
        f"{verb} on {placement.profile}: {result.reason}",
    )


def assess_layout(
    gpu: str,
    assignment: Sequence[tuple[str, str | None]],
    deployments: Mapping[str, Scenario],
    *,
    gpu_hour_price: float | None = None,
    calibrations: Sequence[Calibration] = (),
) -> LayoutReport:
    """One layout whose instances may serve different deployments (or none).

    ``assignment`` pairs each profile with a deployment name (None = idle). The
    whole GPU is paid for; each deployment carries the price in proportion to the
    compute slices it holds, idle slices spread over them the same way.
    """
    layout = tuple(profile for profile, _ in assignment)
    price = gpu_hour_price
    if price is None:
        prices = [d.gpu_hour_price for d in deployments.values()]
        price = prices[0] if prices and all(p == prices[0] for p in prices) else None
    try:
        placements = place_layout(gpu, layout)
    except Infeasible as exc:
        whole = get_gpu(gpu).mig_slices
        return LayoutReport(layout, False, exc.reason, (), (), 0.0, whole, price, None)
    slots = tuple(
        _run_instance(p, name, deployments, gpu, calibrations)
        for p, (_, name) in zip(placements, assignment, strict=True)
    )
    assigned = [s for s in slots if s.deployment is not None]
    serves = bool(assigned) and all(s.serves for s in assigned)
    busy = sum(s.placement.compute_slices for s in assigned if s.serves)
    rps_by: dict[str, float] = {}
    slices_by: dict[str, int] = {}
    for s in assigned:
        if s.result is not None and s.serves and s.deployment is not None:
            rps_by[s.deployment] = (
                rps_by.get(s.deployment, 0.0) + s.result.max_requests_per_s_within_sla
            )
            slices_by[s.deployment] = (
                slices_by.get(s.deployment, 0) + s.placement.compute_slices
            )
    rps = sum(rps_by.values())
    cost = (
        price / (rps * 3600) * 1000
        if serves and price is not None and rps > 0
        else None
    )
    cost_by: dict[str, float | None] = {}
    for name, slices in slices_by.items():
        share = slices / max(busy, 1)
        cost_by[name] = (
            price * share / (rps_by[name] * 3600) * 1000
            if serves and price is not None and rps_by[name] > 0
            else None
        )
    reason = None
    if not serves:
        failing = [s for s in assigned if not s.serves]
        reason = (
            "no instance is assigned a deployment"
            if not assigned
            else "; ".join(
                f"{s.placement.profile}@{s.placement.start} ({s.deployment}): {s.reason}"
                for s in failing
            )
        )
    return LayoutReport(
        layout=layout,
        valid=True,
        reason=reason,
        placements=placements,
        instances=tuple(s.result for s in assigned if s.result is not None),
        requests_per_s=rps,
        idle_compute_slices=get_gpu(gpu).mig_slices - busy,
        gpu_cost_per_hour=price,
        cost_per_1k_requests=cost,
        serves=serves,
        slots=slots,
        requests_per_s_by_deployment=rps_by,
        cost_per_1k_by_deployment=cost_by,
    )


def _ranked(reports: Sequence[LayoutReport]) -> tuple[LayoutReport, ...]:
    order = sorted(
        (i for i, r in enumerate(reports) if r.serves and r.cost_per_1k_requests),
        key=lambda i: reports[i].cost_per_1k_requests or 0.0,
    )
    rank = {i: k + 1 for k, i in enumerate(order)}
    return tuple(
        replace(r, rank=rank.get(i)) if i in rank else r for i, r in enumerate(reports)
    )


def compare_mig_layouts(
    gpu: str,
    layouts: Sequence[Sequence[str]],
    deployment: Scenario,
    *,
    calibrations: Sequence[Calibration] = (),
) -> tuple[LayoutReport, ...]:
    """Each layout runs one replica of ``deployment`` per instance.

    The whole GPU is paid for, so unused slices are idle cost: cost per 1k requests
    divides the GPU's hourly price by what all instances serve within the SLA. A
    layout with an instance that cannot run the deployment is placement-valid but
    does not serve: it gets no cost and no rank. A deployment vLLM refuses whatever
    the instance (max_model_len above the model's, ...) raises ``Refused``.
    """
    name = (
        deployment.model if isinstance(deployment.model, str) else deployment.model.name
    )
    _check_deployment(deployment)
    reports = [
        assess_layout(
            gpu,
            [(profile, name) for profile in layout],
            {name: deployment},
            gpu_hour_price=deployment.gpu_hour_price,
            calibrations=calibrations,
        )
        for layout in layouts
    ]
    return _ranked(reports)


def compare_shared_layouts(
    gpu: str,
    layouts: Sequence[Sequence[tuple[str, str | None]]],
    deployments: Mapping[str, Scenario],
    *,
    gpu_hour_price: float | None = None,
    calibrations: Sequence[Calibration] = (),
) -> tuple[LayoutReport, ...]:
    """Layouts shared by several deployments on one GPU (e.g. code-assist on the
    3g slice, moderation on the 2g slices), ranked among those that serve."""
    for scenario in deployments.values():
        _check_deployment(scenario)
    return _ranked(
        [
            assess_layout(
                gpu,
                layout,
                deployments,
                gpu_hour_price=gpu_hour_price,
                calibrations=calibrations,
            )
            for layout in layouts
        ]
    )


def _check_deployment(scenario: Scenario) -> None:
    """Config-time refusals do not depend on the instance: refuse them once."""
    evaluate(replace(scenario, mig_profile=None, tp=1))
