"""The fleet file's per-deployment target utilisation (headroom's yardstick)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from costapp.fleet.fleetfile import fleet_load
from costapp.models import Deployment
from costapp.yamlfile import FileProblems

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "fleet.example.yaml"


def _with_target(tmp_path: Path, name: str, value: object) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    i = next(i for i, d in enumerate(data["deployments"]) if d["name"] == name)
    data["deployments"][i]["target_utilisation"] = value
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_default_is_70_percent_and_a_declared_share_is_loaded(
    tmp_path: Path,
) -> None:
    fleet_load(path=EXAMPLE)
    assert Deployment.objects.get(name="chat").target_utilisation == 0.7
    result = fleet_load(path=_with_target(tmp_path, "chat", 0.5))
    assert result.updated == ["chat"]
    assert Deployment.objects.get(name="chat").target_utilisation == 0.5
    fleet_load(path=_with_target(tmp_path, "chat", 1))  # full capacity is allowed
    assert Deployment.objects.get(name="chat").target_utilisation == 1.0


@pytest.mark.parametrize("value", [0, 1.5, 70, -0.2, "70%", True, None])
def test_a_target_outside_0_1_is_refused_naming_file_entry_field_and_value(
    tmp_path: Path, value: object
) -> None:
    fleet_load(path=EXAMPLE)
    with pytest.raises(FileProblems) as refused:
        fleet_load(path=_with_target(tmp_path, "summarize", value))
    i = next(
        i
        for i, d in enumerate(yaml.safe_load(EXAMPLE.read_text())["deployments"])
        if d["name"] == "summarize"
    )
    assert (
        f"fleet.yaml: deployments[{i}] (summarize): target_utilisation {value!r} "
        "must be a number in (0, 1]"
    ) in str(refused.value)
    assert len(refused.value.problems) == 1
    assert Deployment.objects.get(name="summarize").target_utilisation == 0.7
