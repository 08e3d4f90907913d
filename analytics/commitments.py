"""Savings-plan and reserved-instance coverage and utilisation, from bill lines.

Read from the same lines as the bill, in the amortized view, per period (a
month or a UTC day), currency and kind of commitment (``savings_plan``,
``reserved``):

- *Coverage* = usage the commitment covered / eligible usage, both at their
  on-demand equivalent (``ON_DEMAND``: what the usage would have cost at
  on-demand rates). Eligible usage is every usage line with the same service
  and usage unit as a line the commitment covered in the period (instance-hours
  of EC2 for a reserved instance of EC2), whether on demand or covered by
  either kind, so the two kinds' coverages add up to the share of that usage
  any commitment covered. Where a line gives no on-demand equivalent (Cost
  Explorer prices a reserved instance's usage at 0 unblended and has no
  on-demand metric) the figure falls back to hours (``HOURS``: covered hours /
  eligible hours, as AWS's reservation coverage counts them) when every
  eligible line is counted in hours, and is missing otherwise.
- *Utilisation* = commitment used / commitment paid for the period, in
  dollars. The commitment paid for the period (recurring fee plus the period's
  share of the upfront fee) is split by the amortized view into the part that
  covered usage (the amortized cost of covered lines: ``used``) and the part
  left unused (the amortized cost of the commitment's fee lines: ``unused``,
  AWS's RIFee and SavingsPlanRecurringFee, FOCUS's "Unused" rows), so
  ``commitment_cost = used + unused``.

A figure with nothing to divide by (no eligible usage, nothing paid) or an
input that is missing is ``None``: missing, never 0. A period still in
progress (``partial``) is computed like any other and labelled so by the
caller's choice of periods; it is never a finished period's figure.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analytics.errors import InvalidInput

KINDS = ("savings_plan", "reserved")
ON_DEMAND = "on-demand equivalent"
HOURS = "hours"
HOUR_UNITS = frozenset({"hrs", "hr", "hours", "hour"})
REQUIRED = (
    "period",
    "currency",
    "service",
    "record_type",
    "commitment",
    "usage_unit",
    "on_demand",  # the on-demand equivalent in $; NaN where the source has none
    "amortized",  # amortized (FOCUS: effective) cost in $
    "quantity",  # usage quantity in usage_unit
)


@dataclass(frozen=True)
class CommitmentFigures:
    period: Hashable
    currency: str
    commitment: str  # one of KINDS
    partial: bool
    coverage: float | None  # 0..1 of eligible usage
    coverage_basis: str  # ON_DEMAND, HOURS, or "" when not measured
    covered: float | None  # in the basis' unit ($ or hours)
    eligible: float | None
    used: float | None  # $ of commitment that covered usage
    unused: float | None  # $ of commitment nothing used
    commitment_cost: float | None  # used + unused: paid for the period
    utilisation: float | None  # used / commitment_cost


def _sum(values: pd.Series) -> float | None:
    """The sum, or None if any value is missing (an unknown part makes the
    whole unknown)."""
    if values.isna().any():
        return None
    return float(values.sum())


def _ratio(part: float | None, whole: float | None) -> float | None:
    if part is None or whole is None or whole <= 0:
        return None
    return part / whole


def _coverage(
    usage: pd.DataFrame, kind: str
) -> tuple[float | None, str, float | None, float | None]:
    """(coverage, basis, covered, eligible) of one period's usage lines."""
    covered = usage[usage["commitment"] == kind]
    if covered.empty:
        return None, "", None, None
    covered_kinds = set(zip(covered["service"], covered["usage_unit"], strict=True))
    in_kind = [
        key in covered_kinds
        for key in zip(usage["service"], usage["usage_unit"], strict=True)
    ]
    eligible = usage[np.array(in_kind, dtype=bool)]
    hours = eligible["usage_unit"].str.lower().isin(HOUR_UNITS).all()
    if eligible["on_demand"].notna().all():
        basis, column = ON_DEMAND, "on_demand"
    elif hours and eligible["quantity"].notna().all():
        basis, column = HOURS, "quantity"
    else:
        return None, "", None, None
    part, whole = _sum(covered[column]), _sum(eligible[column])
    return _ratio(part, whole), basis, part, whole


def _figures(
    lines: pd.DataFrame, kind: str, period: Hashable, currency: str, partial: bool
) -> CommitmentFigures:
    usage = lines[lines["record_type"] == "usage"]
    coverage, basis, covered, eligible = _coverage(usage, kind)
    used = _sum(usage.loc[usage["commitment"] == kind, "amortized"])
    fees = lines[(lines["record_type"] == "fee") & (lines["commitment"] == kind)]
    unused = _sum(fees["amortized"])
    paid = None if used is None or unused is None else used + unused
    return CommitmentFigures(
        period=period,
        currency=currency,
        commitment=kind,
        partial=partial,
        coverage=coverage,
        coverage_basis=basis,
        covered=covered,
        eligible=eligible,
        used=used,
        unused=unused,
        commitment_cost=paid,
        utilisation=_ratio(used, paid),
    )


def commitment_figures(
    lines: pd.DataFrame, *, partial: Collection[Hashable] = ()
) -> list[CommitmentFigures]:
    """Coverage and utilisation per period, currency and kind present.

    ``lines``: bill lines summed to ``REQUIRED`` columns (floats; convert
    Decimals at the edge), one period label per row. ``partial``: the periods
    still in progress. A period and currency with no line of a kind has no
    figures for it: an empty result means no commitment in these lines.
    """
    for name in REQUIRED:
        if name not in lines.columns:
            raise InvalidInput(name, None, "column is required")
    frame = lines.assign(
        **{
            name: pd.to_numeric(lines[name], errors="coerce")
            for name in ("on_demand", "amortized", "quantity")
        },
        usage_unit=lines["usage_unit"].fillna("").astype(str),
    )
    out = []
    for (period, currency), group in frame.groupby(["period", "currency"], sort=True):
        for kind in KINDS:
            if (group["commitment"] == kind).any():
                out.append(
                    _figures(group, kind, period, str(currency), period in partial)
                )
    return out
