"""Team holiday calendars from the fleet file: validated with the field named,
stored, turned into days and marked on the figures they cover."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analytics.unit_cost_frames import holiday_marks
from costapp.economics.unit_costs.inputs import holidays_read
from costapp.fleet.fleetfile import fleet_load
from costapp.models import TeamHoliday
from costapp.models.economics import FLEET
from costapp.yamlfile import FileProblems

pytestmark = [pytest.mark.django_db]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "fleet.example.yaml"


def _with_holidays(tmp_path: Path, holidays: list[dict]) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["holidays"] = holidays
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _teams() -> set[str]:
    data = yaml.safe_load(EXAMPLE.read_text())
    return {d["team"] for d in data["deployments"] if d.get("team")}


def test_the_fleet_file_stores_countries_and_days_and_replaces_them_on_reload(
    tmp_path: Path,
) -> None:
    team = sorted(_teams())[0]
    path = _with_holidays(
        tmp_path,
        [
            {"team": team, "country": "US", "subdiv": "CA"},
            {"day": "2026-12-24", "name": "office closed"},
        ],
    )
    result = fleet_load(path=path)
    assert result.holidays == 2
    rows = sorted(
        TeamHoliday.objects.values_list("team", "country", "subdiv", "day", "name")
    )
    assert rows == [
        ("*", "", "", date(2026, 12, 24), "office closed"),
        (team, "US", "CA", None, ""),
    ]
    assert fleet_load(path=_with_holidays(tmp_path, [])).holidays == 0
    assert not TeamHoliday.objects.exists()


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"country": "XX"}, "holidays[0]: country 'XX' is not an ISO country"),
        ({"country": "US", "subdiv": "ZZ"}, "holidays[0]: subdiv 'ZZ' is not a subdivision of US"),
        ({"day": "2026-13-01"}, "holidays[0]: day must be a date (YYYY-MM-DD), got '2026-13-01'"),
        ({"team": "nobody", "day": "2026-12-24"}, "holidays[0]: team 'nobody' is not a team"),
        ({"country": "US", "day": "2026-12-24"}, "holidays[0]: country give either a country or a day"),
        ({}, "holidays[0]: country give either a country or a day"),
        ({"day": "2026-12-24", "when": 1}, "holidays[0]: when unknown"),
    ],
)  # fmt: skip
def test_a_bad_holiday_is_refused_naming_entry_field_and_value(
    tmp_path: Path, entry: dict, words: str
) -> None:
    with pytest.raises(FileProblems) as info:
        fleet_load(path=_with_holidays(tmp_path, [entry]))
    assert words in str(info.value)
    assert not TeamHoliday.objects.exists()


def test_stored_calendars_become_days_per_team() -> None:
    TeamHoliday.objects.create(team="a", country="US")
    TeamHoliday.objects.create(team="*", day=date(2026, 11, 3), name="demo holiday")
    days = holidays_read(
        teams=["a", "b"], start=date(2026, 11, 1), end=date(2026, 12, 1)
    )
    got = {(r.team, r.day.date(), r.name) for r in days.itertuples()}
    assert got == {
        ("a", date(2026, 11, 3), "demo holiday"),
        ("b", date(2026, 11, 3), "demo holiday"),
        ("a", date(2026, 11, 11), "Veterans Day"),
        ("a", date(2026, 11, 26), "Thanksgiving Day"),
    }


def test_an_aggregate_is_on_holiday_only_when_every_team_in_it_is() -> None:
    deployments = pd.DataFrame(
        {"name": ["x", "y", "z"], "team": ["a", "a", "b"], "pool": ["p", "q", "q"]}
    )
    holidays = pd.DataFrame(
        {"team": ["a"], "day": [pd.Timestamp("2026-11-03")], "name": ["h"]}
    )
    series = [("deployment", "x"), ("deployment", "z"), ("team", "a"), ("team", "b"),
              ("pool", "p"), ("pool", "q"), ("fleet", "fleet")]  # fmt: skip
    hours = pd.DatetimeIndex(["2026-11-03 05:00", "2026-11-04 05:00"])
    frame = pd.DataFrame(
        [(s, n, t) for s, n in series for t in hours],
        columns=["scope", "name", "period_start"],
    )
    marks = holiday_marks(frame, holidays, deployments, fleet=FLEET).reshape(
        len(series), 2
    )
    assert not marks[:, 1].any()  # the next day is nobody's holiday
    assert dict(zip(series, marks[:, 0].tolist(), strict=True)) == {
        ("deployment", "x"): True,
        ("deployment", "z"): False,
        ("team", "a"): True,
        ("team", "b"): False,
        ("pool", "p"): True,  # only team a's deployment runs there
        ("pool", "q"): False,  # shared with team b, at work
        ("fleet", "fleet"): False,
    }
    assert not holiday_marks(frame, holidays.iloc[:0], deployments, fleet=FLEET).any()
    assert isinstance(marks, np.ndarray)
