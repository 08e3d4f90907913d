"""Where the figures' own inputs say the price moved for a known reason.

``known_price_marks`` reads a grain's figure rows (``analytics.unit_cost_frames``)
and the allocated bill's commitment and one-off lines per deployment and day,
and returns the columns ``analytics.price_events`` acts on:

- ``price_change``: the series' effective rate (learnt from the final bill)
  moved, a deployment's rate card changed on a day priced by it, or a
  recurring discount line (a savings plan's negation, a reserved instance's
  discount) started or ended in its allocated bill;
- ``price_lump`` and ``price_lump_amount``: credits, refunds, fees and taxes
  allocated to the deployment that day, named with their amounts.

A deployment's rate-card and bill-line events are its pool's, team's and the
fleet's too, named after it (the aggregate measures how much they moved it).
Each mark rests on the day and the one before it only, so an incremental
recompute from any day marks the same rows as the full one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

KEYS = ["scope", "name", "currency"]
# A rate moving by less than this (relative) is rounding, not a new rate.
RATE_TOLERANCE = 0.005
MARKS = ("price_change", "price_lump", "price_lump_amount")


def known_price_marks(
    frame: pd.DataFrame, bills: pd.DataFrame, deployments: pd.DataFrame, *,
    fleet: str,
) -> pd.DataFrame:  # fmt: skip
    """``MARKS`` for every row of ``frame`` (same index): "" and NaN where
    nothing is known. ``bills`` may carry ``recurring`` (the day's recurring
    discount lines, "; "-joined), ``lump`` (its one-off lines, named with
    their amounts) and ``lump_amount``; without them only the clock and the
    rates are read."""
    out = pd.DataFrame(
        {"price_change": "", "price_lump": "", "price_lump_amount": np.nan},
        index=frame.index,
    )
    if frame.empty:
        return out
    # Not a clock switch: a bill arriving above its provisional estimate is
    # news (the billed-day rule pages on it), not a price to learn silently.
    causes = [_rate_moves(frame, "effective_rate", "effective", "effective rate")]
    own = _rate_moves(frame, "rate_card", "rate_card", "rate card")
    lines, lumps = _bill_line_events(bills)
    per_deployment = _deployment_events(frame, own, lines)
    causes.append(_propagated(frame, per_deployment, deployments, fleet=fleet))
    out["price_change"] = _joined(causes)
    if len(lumps):
        lumped = _propagated(frame, lumps["lump"], deployments, fleet=fleet)
        amounts = _propagated_sum(frame, lumps["lump_amount"], deployments, fleet)
        out["price_lump"] = lumped.to_numpy(object)
        out["price_lump_amount"] = amounts.to_numpy(float)
    return out


def _previous(frame: pd.DataFrame, column: str) -> pd.Series:
    return frame.groupby(KEYS, sort=False)[column].shift()


def _rate_moves(frame: pd.DataFrame, column: str, source: str, name: str) -> pd.Series:
    """A rate that moved between a series' consecutive rows, both priced by
    it (``rate_source``). The rate card per GPU-hour is ``list_cost`` over
    GPU-hours (deployments only: an aggregate's mixes its members')."""
    if column == "rate_card":
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = pd.Series(
                frame["list_cost"].to_numpy(float) / frame["gpu_hours"].to_numpy(float),
                index=frame.index,
            )
        rate = rate.where(frame["scope"] == "deployment")
    else:
        rate = pd.to_numeric(frame[column], errors="coerce")
    priced = (frame["rate_source"] == source).to_numpy()
    rated = frame.assign(_rate=rate.where(priced), _priced=priced)
    before = _previous(rated, "_rate")
    with np.errstate(divide="ignore", invalid="ignore"):
        moved = ((np.abs(rate / before - 1.0) > RATE_TOLERANCE) & priced).to_numpy()
    out = pd.Series("", index=frame.index, dtype=object)
    out[moved] = [
        f"{name} ${a:.4g} \N{RIGHTWARDS ARROW} ${b:.4g} per GPU-hour"
        for a, b in zip(before[moved], rate[moved], strict=True)
    ]
    return out


def _bill_line_events(bills: pd.DataFrame) -> tuple[pd.Series, pd.DataFrame]:
    """Per (deployment, day, currency): the recurring discount lines that
    started or ended against its previous bill day, and its lumps."""
    index = ["deployment", "day", "currency"]
    if bills.empty or "recurring" not in bills.columns:
        return pd.Series(dtype=object), pd.DataFrame(columns=["lump", "lump_amount"])
    b = bills.sort_values(index).reset_index(drop=True)
    now = b["recurring"].fillna("").map(_line_set)
    before = now.groupby([b["deployment"], b["currency"]]).shift()
    texts = []
    for was, is_ in zip(before, now, strict=True):
        if not isinstance(was, frozenset):
            texts.append("")
            continue
        said = [f"started: {x}" for x in sorted(is_ - was)]
        said += [f"ended: {x}" for x in sorted(was - is_)]
        texts.append("; ".join(said))
    events = pd.Series(texts, index=pd.MultiIndex.from_frame(b[index]))
    lumps = b.loc[b["lump"].fillna("") != "", [*index, "lump", "lump_amount"]]
    return events[events != ""], lumps.set_index(index)


def _line_set(text: str) -> frozenset[str]:
    return frozenset(x for x in text.split("; ") if x)


def _deployment_events(
    frame: pd.DataFrame, rate_card: pd.Series, lines: pd.Series
) -> pd.Series:
    """(deployment, day, currency) -> its own known changes, joined."""
    dep = frame["scope"] == "deployment"
    days = pd.DatetimeIndex(frame["period_start"]).normalize()
    keyed = pd.Series(
        rate_card[dep].to_numpy(object),
        index=pd.MultiIndex.from_arrays(
            [frame["name"][dep], days[dep.to_numpy()], frame["currency"][dep]]
        ),
    )
    keyed = keyed[keyed != ""]
    both = pd.concat([keyed, lines])
    if both.empty:
        return both
    return both.groupby(level=[0, 1, 2]).agg(lambda s: "; ".join(sorted(set(s))))


def _members(deployments: pd.DataFrame, fleet: str) -> pd.DataFrame:
    """(deployment, scope, name, prefix): each deployment's own series and the
    aggregates it is part of."""
    rows = []
    for name, team, pool in deployments[["name", "team", "pool"]].itertuples(
        index=False
    ):
        rows.append((name, "deployment", name, ""))
        if pool:
            rows.append((name, "pool", pool, f"{name}: "))
        if team:
            rows.append((name, "team", team, f"{name}: "))
        rows.append((name, "fleet", fleet, f"{name}: "))
    return pd.DataFrame(rows, columns=["deployment", "scope", "name", "prefix"])


def _spread(
    frame: pd.DataFrame, per_deployment: pd.Series, deployments: pd.DataFrame,
    fleet: str,
) -> pd.DataFrame:  # fmt: skip
    """The deployment values on each row of their series and aggregates:
    columns row (position in ``frame``), prefix, value."""
    if per_deployment.empty:
        return pd.DataFrame(columns=["row", "prefix", "value"])
    values = per_deployment.rename("value").reset_index()
    values.columns = ["deployment", "day", "currency", "value"]
    values["day"] = pd.DatetimeIndex(values["day"])
    rows = pd.DataFrame(
        {
            "scope": frame["scope"].to_numpy(),
            "name": frame["name"].to_numpy(),
            "currency": frame["currency"].to_numpy(),
            "day": pd.DatetimeIndex(frame["period_start"]).normalize(),
            "row": np.arange(len(frame)),
        }
    )
    spread = values.merge(_members(deployments, fleet), on="deployment")
    return spread.merge(rows, on=["scope", "name", "currency", "day"])


def _propagated(
    frame: pd.DataFrame, per_deployment: pd.Series, deployments: pd.DataFrame, *,
    fleet: str,
) -> pd.Series:  # fmt: skip
    """Text per row of ``frame``: its deployments' events, named in an
    aggregate after the deployment."""
    out = np.full(len(frame), "", dtype=object)
    spread = _spread(frame, per_deployment, deployments, fleet)
    if len(spread):
        text = spread["prefix"] + spread["value"].astype(str)
        joined = text.groupby(spread["row"]).agg(lambda s: "; ".join(sorted(s)))
        out[joined.index.to_numpy(int)] = joined.to_numpy(object)
    return pd.Series(out, index=frame.index)


def _propagated_sum(
    frame: pd.DataFrame, per_deployment: pd.Series, deployments: pd.DataFrame,
    fleet: str,
) -> pd.Series:  # fmt: skip
    out = np.full(len(frame), np.nan)
    spread = _spread(frame, per_deployment, deployments, fleet)
    if len(spread):
        sums = spread["value"].astype(float).groupby(spread["row"]).sum()
        out[sums.index.to_numpy(int)] = sums.to_numpy(float)
    return pd.Series(out, index=frame.index)


def _joined(parts: list[pd.Series]) -> np.ndarray:
    """Row-wise "; "-join of the non-empty texts (a loop over the marked
    rows only: an hourly fleet frame has millions of rows, few marked)."""
    columns = [p.fillna("").to_numpy(object) for p in parts]
    out = np.full(len(columns[0]), "", dtype=object)
    marked = np.zeros(len(out), dtype=bool)
    for c in columns:
        marked |= c != ""
    for i in np.flatnonzero(marked):
        out[i] = "; ".join(c[i] for c in columns if c[i])
    return out
