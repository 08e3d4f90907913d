from __future__ import annotations

import pandas as pd
import pytest

from analytics.calendar import holiday_calendar, holiday_column
from analytics.errors import InvalidInput


def test_each_team_gets_its_countrys_public_holidays_and_the_fleet_file_dates() -> None:
    teams = pd.DataFrame({"team": ["us", "de", "none"], "country": ["US", "DE", ""]})
    user = pd.DataFrame(
        {
            "team": ["*", "de"],
            "day": ["2026-11-27", "2026-12-24"],
            "name": ["", "Heiligabend"],
        }
    )
    cal = holiday_calendar(teams, start="2026-11-01", end="2026-12-31", user_dates=user)
    us = cal[cal["team"] == "us"].set_index("day")["name"]
    assert us[pd.Timestamp("2026-11-26")] == "Thanksgiving Day"
    assert us[pd.Timestamp("2026-11-27")] == "holiday (fleet file)"
    de = cal[cal["team"] == "de"].set_index("day")["name"]
    assert pd.Timestamp("2026-11-26") not in de.index
    assert de[pd.Timestamp("2026-12-24")] == "Heiligabend"
    assert (
        de[pd.Timestamp("2026-12-25")] == "Erster Weihnachtstag"
        or "Christmas" in de[pd.Timestamp("2026-12-25")]
    )
    # A team without a country still gets the dates kept for every team.
    assert cal[cal["team"] == "none"]["day"].tolist() == [pd.Timestamp("2026-11-27")]


def test_an_unknown_country_is_refused_by_name() -> None:
    with pytest.raises(InvalidInput, match="country='XX'"):
        holiday_calendar(
            pd.DataFrame({"team": ["t"], "country": ["XX"]}),
            start="2026-01-01",
            end="2026-01-31",
        )


def test_hours_take_the_holiday_of_their_utc_day() -> None:
    cal = pd.DataFrame(
        {"team": ["us"], "day": [pd.Timestamp("2026-11-26")], "name": ["x"]}
    )
    hours = pd.DataFrame(
        {
            "team": ["us", "us", "de"],
            "period_start": pd.to_datetime(
                ["2026-11-26 23:00", "2026-11-27 00:00", "2026-11-26 12:00"]
            ),
        }
    )
    assert holiday_column(hours, cal).tolist() == [True, False, False]
