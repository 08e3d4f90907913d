"""MIG placements against NVIDIA's published valid combinations.

The maximal layouts below are typed from the MIG user guide's placement figures
(A100-40GB, A100-80GB, H100-80GB, H200), independently of the code's placement
table: every sub-multiset of a listed layout is valid, everything else is refused.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import pytest

from analytics.capacity import Scenario, evaluate
from analytics.capacity.mig import (
    compare_mig_layouts,
    compare_shared_layouts,
    is_valid_layout,
    place_layout,
)
from analytics.errors import InvalidInput

# Profile letters: S = 1g (one memory slice), D = 1g with two memory slices,
# two = 2g, three = 3g, four = 4g, seven = 7g.
NAMES = {
    "A100-40GB": {
        "S": "1g.5gb",
        "D": "1g.10gb",
        "2": "2g.10gb",
        "3": "3g.20gb",
        "4": "4g.20gb",
        "7": "7g.40gb",
    },
    "A100-80GB": {
        "S": "1g.10gb",
        "D": "1g.20gb",
        "2": "2g.20gb",
        "3": "3g.40gb",
        "4": "4g.40gb",
        "7": "7g.80gb",
    },
    "H100-SXM": {
        "S": "1g.10gb",
        "D": "1g.20gb",
        "2": "2g.20gb",
        "3": "3g.40gb",
        "4": "4g.40gb",
        "7": "7g.80gb",
    },
    "H200": {
        "S": "1g.18gb",
        "D": "1g.35gb",
        "2": "2g.35gb",
        "3": "3g.71gb",
        "4": "4g.71gb",
        "7": "7g.141gb",
    },
}

# Maximal layouts (left half of memory | right half), as the guide draws them.
MAXIMAL = [
    "7",
    "4 3",
    "4 2S",
    "4 2D",
    "4 SSS",
    "4 SSD",
    "4 DD",
    "3 3",
    "3 2S",
    "3 2D",
    "3 SSS",
    "3 SSD",
    "3 DD",
    "22 3",
    "22 2S",
    "22 2D",
    "22 SSS",
    "22 SSD",
    "22 DD",
    "2SS 3",
    "2SS 2S",
    "2SS 2D",
    "2SS SSS",
    "2SS SSD",
    "2SS DD",
    "2D 3",
    "2D 2S",
    "2D 2D",
    "2D SSS",
    "2D SSD",
    "2D DD",
    "DD 3",
    "DD 2S",
    "DD 2D",
    "DD SSS",
    "DD SSD",
    "DD DD",
    "DSS 3",
    "DSS 2S",
    "DSS 2D",
    "DSS SSS",
    "DSS SSD",
    "DSS DD",
    "SSSS 3",
    "SSSS 2S",
    "SSSS 2D",
    "SSSS SSS",
    "SSSS SSD",
    "SSSS DD",
]


def _counter(layout: str) -> Counter[str]:
    return Counter(ch for ch in layout if ch != " ")


MAXIMAL_COUNTERS = [_counter(layout) for layout in MAXIMAL]
COMPUTE = {"S": 1, "D": 1, "2": 2, "3": 3, "4": 4, "7": 7}


def _published_valid(combo: Counter[str]) -> bool:
    compute = sum(COMPUTE[k] * n for k, n in combo.items())
    if compute > 7:
        return False
    return any(all(top[k] >= n for k, n in combo.items()) for top in MAXIMAL_COUNTERS)


def _all_multisets(max_items: int = 7) -> list[Counter[str]]:
    out = []
    for size in range(1, max_items + 1):
        for combo in itertools.combinations_with_replacement("SD2347", size):
            counter = Counter(combo)
            if sum(COMPUTE[k] * n for k, n in counter.items()) <= 8:
                out.append(counter)
    return out


@pytest.mark.parametrize("gpu", sorted(NAMES))
def test_every_profile_combination_is_accepted_exactly_when_nvidia_lists_it(
    gpu: str,
) -> None:
    names = NAMES[gpu]
    mismatches = []
    for combo in _all_multisets():
        layout = [names[k] for k, n in sorted(combo.items()) for _ in range(n)]
        expected = _published_valid(combo)
        if is_valid_layout(gpu, layout) != expected:
            mismatches.append((layout, expected))
    assert mismatches == []


def test_three_g_starts_only_at_memory_slice_0_or_4() -> None:
    placements = place_layout("A100-80GB", ["3g.40gb", "3g.40gb"])
    assert sorted(p.start for p in placements) == [0, 4]


def test_a_layout_needing_eight_compute_slices_is_refused_with_the_reason() -> None:
    reports = compare_mig_layouts(
        "A100-80GB",
        [["4g.40gb", "4g.40gb"]],
        Scenario(
            model="Llama-3.2-3B",
            gpu="A100-80GB",
            max_model_len=4096,
            gpu_hour_price=4.0,
        ),
    )
    assert not reports[0].valid and "compute slices" in (reports[0].reason or "")


def test_it_refuses_tp_across_mig_instances() -> None:
    with pytest.raises(InvalidInput, match="tp"):
        evaluate(
            Scenario(model="Llama-3.1-8B", gpu="A100-80GB", mig_profile="3g.40gb", tp=2)
        )


def test_layout_comparison_reports_capacity_per_instance_and_cost_per_1k() -> None:
    deployment = Scenario(
        model="Llama-3.2-3B",
        gpu="A100-80GB",
        max_model_len=4096,
        prompt_tokens=256,
        output_tokens=128,
        itl_sla_ms=80,
        gpu_hour_price=3.43,
    )
    reports = compare_mig_layouts(
        "A100-80GB",
        [
            ["7g.80gb"],
            ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
            ["3g.40gb", "3g.40gb"],
        ],
        deployment,
    )
    assert all(r.valid for r in reports)
    mixed = reports[1]
    assert len(mixed.instances) == 4 and mixed.idle_compute_slices == 0
    assert all("uncalibrated" in " ".join(r.warnings) for r in mixed.instances)
    assert reports[2].idle_compute_slices == 1
    assert all(r.cost_per_1k_requests and r.cost_per_1k_requests > 0 for r in reports)


def test_a_mig_instance_carries_its_compute_share_of_the_gpu_price() -> None:
    result = evaluate(
        Scenario(
            model="Llama-3.2-1B",
            gpu="A100-80GB",
            mig_profile="3g.40gb",
            max_model_len=4096,
            gpu_hour_price=7.0,
        )
    )
    assert result.gpu_share_per_replica == pytest.approx(3 / 7)
    assert result.cost_per_hour == pytest.approx(3.0)


SMALL = Scenario(
    model="Llama-3.2-1B",
    gpu="A100-80GB",
    max_model_len=4096,
    prompt_tokens=256,
    output_tokens=128,
    itl_sla_ms=80,
    gpu_hour_price=3.43,
)


def test_a_placement_valid_layout_whose_instance_cannot_run_the_model_does_not_serve() -> (
    None
):
    # Llama-3.1-8B in bf16 is 16 GB of weights: a 1g.10gb instance cannot hold it.
    big = replace(SMALL, model="Llama-3.1-8B")
    reports = compare_mig_layouts(
        "A100-80GB", [["3g.40gb", "1g.10gb"], ["3g.40gb"]], big
    )
    mixed, alone = reports
    assert mixed.valid and mixed.placement_valid and not mixed.serves
    failing = [s for s in mixed.slots if not s.serves]
    assert [s.placement.profile for s in failing] == ["1g.10gb"]
    assert failing[0].reason is not None
    assert failing[0].reason.startswith("does not start on 1g.10gb")
    assert "1g.10gb" in (mixed.reason or "")
    # Not ranked, no cost, and the 1g that runs nothing is idle, not busy.
    assert mixed.rank is None and mixed.cost_per_1k_requests is None
    assert mixed.idle_compute_slices == 4  # only the 3g serves
    assert alone.serves and alone.rank == 1 and alone.idle_compute_slices == 4


def test_only_layouts_that_serve_are_ranked_cheapest_first() -> None:
    reports = compare_mig_layouts(
        "A100-80GB",
        [["7g.80gb"], ["4g.40gb", "4g.40gb"], ["3g.40gb", "3g.40gb"], ["1g.10gb"]],
        SMALL,
    )
    seven, invalid, two_threes, one = reports
    assert not invalid.valid and invalid.rank is None
    assert seven.serves and two_threes.serves and one.serves
    ranked = sorted((r for r in reports if r.rank), key=lambda r: r.rank or 0)
    assert all(r.serves for r in ranked)
    costs = [r.cost_per_1k_requests or 0.0 for r in ranked]
    assert (
        costs == sorted(costs) and [r.rank for r in ranked] == [1, 2, 3][: len(ranked)]
    )
    assert one.idle_compute_slices == 6


def test_a_layout_shared_by_two_deployments_on_one_gpu_is_modelled() -> None:
    deployments = {
        "code-assist": replace(SMALL, model="Llama-3.2-3B"),
        "moderation": SMALL,
    }
    shared, with_idle = compare_shared_layouts(
        "A100-80GB",
        [
            [
                ("3g.40gb", "code-assist"),
                ("2g.20gb", "moderation"),
                ("2g.20gb", "moderation"),
            ],
            [("3g.40gb", "code-assist"), ("2g.20gb", "moderation"), ("2g.20gb", None)],
        ],
        deployments,
    )
    assert shared.serves and shared.idle_compute_slices == 0
    assert set(shared.requests_per_s_by_deployment) == {"code-assist", "moderation"}
    assert shared.requests_per_s == pytest.approx(
        sum(shared.requests_per_s_by_deployment.values())
    )
    # The GPU's price splits by compute slices held: 3/7 and 4/7.
    code = shared.cost_per_1k_by_deployment["code-assist"]
    rps = shared.requests_per_s_by_deployment["code-assist"]
    assert code == pytest.approx(3.43 * 3 / 7 / (rps * 3600) * 1000)
    # An unassigned instance is idle; the layout still serves what is assigned.
    assert with_idle.serves and with_idle.idle_compute_slices == 2
    assert with_idle.slots[2].deployment is None
    assert (
        with_idle.requests_per_s_by_deployment["moderation"]
        < shared.requests_per_s_by_deployment["moderation"]
    )
    assert with_idle.rank == 2 and shared.rank == 1
