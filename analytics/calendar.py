"""Holiday calendar per team: public holidays (the ``holidays`` package) plus
dates a user keeps in the fleet file.

Baselines hold holidays out of their update (``analytics.baselines``) and the
explanation says "holiday dip"; nothing here decides whether a day is an
anomaly. Days are UTC days, like every other day in costapp.
"""

from __future__ import annotations

from collections.abc import Sequence

import holidays as holidays_lib
import numpy as np
import pandas as pd

from analytics.errors import InvalidInput

# A user date with this team (or an empty one) applies to every team.
ALL_TEAMS = "*"


def holiday_calendar(
    teams: pd.DataFrame,
    *,
    start: pd.Timestamp | str,
    end: pd.Timestamp | str,
    user_dates: pd.DataFrame | None = None,
    all_teams: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Holidays of each team between ``start`` and ``end`` (inclusive days).

    ``teams`` columns: ``team``, ``country`` (ISO code, empty for none) and
    optional ``subdiv`` (state or province code). ``user_dates`` columns:
    ``team`` (``*`` or empty: every team), ``day`` and optional ``name``.

    ``all_teams`` are the teams a ``*`` date applies to (default: those of
    ``teams``).

    Returns ``team, day, name`` (one row per team and holiday day; several
    names of one day are joined with "; "), sorted.
    """
    first = pd.Timestamp(start).normalize()
    last = pd.Timestamp(end).normalize()
    years = list(range(first.year, last.year + 1))
    rows: list[tuple[str, pd.Timestamp, str]] = []
    for rec in teams.to_dict("records"):
        team = str(rec["team"])
        country = rec.get("country")
        if not isinstance(country, str) or not country:
            continue
        subdiv = rec.get("subdiv")
        subdiv = subdiv if isinstance(subdiv, str) and subdiv else None
        try:
            cal = holidays_lib.country_holidays(country, subdiv=subdiv, years=years)
        except NotImplementedError as exc:
            field = "subdiv" if subdiv and "ubdiv" in str(exc) else "country"
            raise InvalidInput(
                field, subdiv if field == "subdiv" else country, str(exc)
            ) from exc
        for day, name in cal.items():
            stamp = pd.Timestamp(day)
            if first <= stamp <= last:
                rows.append((team, stamp, str(name)))
    if user_dates is not None and len(user_dates):
        everyone = (
            [str(t) for t in all_teams]
            if all_teams is not None
            else [str(t) for t in teams["team"]]
        )
        for rec in user_dates.to_dict("records"):
            try:
                stamp = pd.Timestamp(rec["day"]).normalize()
            except (ValueError, TypeError) as exc:
                raise InvalidInput("day", rec["day"], "not a date") from exc
            if not first <= stamp <= last:
                continue
            who = rec.get("team")
            targets = (
                everyone
                if not isinstance(who, str) or who in ("", ALL_TEAMS)
                else [who]
            )
            name = rec.get("name")
            label = name if isinstance(name, str) and name else "holiday (fleet file)"
            rows.extend((t, stamp, label) for t in targets)
    out = pd.DataFrame(rows, columns=["team", "day", "name"])
    if out.empty:
        return out.astype({"team": object, "day": "datetime64[ns]", "name": object})
    out = (
        out.drop_duplicates()
        .groupby(["team", "day"], as_index=False, sort=True)["name"]
        .agg("; ".join)
    )
    return out


def holiday_column(
    frame: pd.DataFrame,
    calendar: pd.DataFrame,
    *,
    team: str = "team",
    time: str = "period_start",
) -> np.ndarray:
    """Boolean per row of ``frame``: its UTC day is a holiday of its team.

    Hours take the holiday of their UTC day.
    """
    if calendar.empty or frame.empty:
        return np.zeros(len(frame), dtype=bool)
    days = pd.DatetimeIndex(pd.to_datetime(frame[time], utc=True)).tz_convert(None)
    keys = pd.MultiIndex.from_arrays([frame[team].astype(str), days.normalize()])
    cal = pd.MultiIndex.from_arrays(
        [calendar["team"].astype(str), pd.DatetimeIndex(calendar["day"]).normalize()]
    )
    return np.asarray(keys.isin(cal))


def teams_from_pairs(pairs: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """``[(team, country), ...]`` as the ``teams`` frame (a convenience)."""
    return pd.DataFrame(pairs, columns=["team", "country"])
