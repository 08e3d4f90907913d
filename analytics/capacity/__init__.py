"""Capacity what-if engine (pure: numpy, pandas, scipy; no Django, no I/O of its own).

Public API: ``evaluate``, ``evaluate_grid``, ``compare``, ``compare_mig_layouts``,
``search``, ``simulate``; calibration import in ``calibration``.
"""

from analytics.capacity.engine import (
    Comparison,
    Result,
    Scenario,
    compare,
    evaluate,
    evaluate_grid,
    step_model,
)
from analytics.capacity.errors import CapacityError, Infeasible, Refused
from analytics.capacity.mig import (
    compare_mig_layouts,
    compare_shared_layouts,
    place_layout,
)
from analytics.capacity.refusals import rejected_share
from analytics.capacity.search import search
from analytics.capacity.simulate import poisson_arrivals, simulate

__all__ = [
    "CapacityError",
    "Comparison",
    "Infeasible",
    "Refused",
    "Result",
    "Scenario",
    "compare",
    "compare_mig_layouts",
    "compare_shared_layouts",
    "evaluate",
    "evaluate_grid",
    "place_layout",
    "poisson_arrivals",
    "rejected_share",
    "search",
    "simulate",
    "step_model",
]
