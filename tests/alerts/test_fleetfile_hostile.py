"""The fleet file's ``alerts:`` section, hostile: read by the one bounded
YAML reader, every odd shape refused naming the entry and the field, never a
TypeError or a database error."""

from __future__ import annotations

from pathlib import Path

import pytest

from costapp.alerts.fleetfile import alert_rules_load
from costapp.models import AlertRule, Channel
from costapp.yamlfile import FileProblems
from tests.support.hostile_yaml import alias_bomb

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

RULE = (
    "metric: daily_spend, grain: day, scope: fleet, condition: threshold, threshold: 5"
)


def _file(tmp_path: Path, content: bytes | str) -> Path:
    path = tmp_path / "fleet.yaml"
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (alias_bomb(), "fleet.yaml: line 7, column 9: more than 100,000 values"),
        ("alerts: x\n".encode("utf-16"), "fleet.yaml: line 1: is UTF-16 text"),
        (b"alerts: {rules: \x00}\n", "contains a NUL byte (at byte 16)"),
        ("alerts: {channels: 5}\n", "alerts.channels: must be a list, got 5"),
        ("alerts: {rules: {a: 1}}\n", "alerts.rules: must be a list, got {'a': 1}"),
        (
            "alerts: {rules: [{name: r, channels: 7, " + RULE + "}]}\n",
            "alerts.rules[0] (r): channels: 7: a list of channel names",
        ),
        (
            "alerts: {rules: [{name: r, channels: [[oncall]], " + RULE + "}]}\n",
            "channels: [['oncall']]: a list of channel names",
        ),
        (
            "alerts: {rules: [{name: [1], " + RULE + "}]}\n",
            "alerts.rules[0] ([1]): name=[1]: text of at most 100 characters",
        ),
        (
            "alerts: {rules: [{name: " + "r" * 5000 + ", " + RULE + "}]}\n",
            "name='rrrrrrrr",
        ),
        (
            "alerts: {rules: [{name: r, scope_name: " + "t" * 500 + ", " + RULE + "}]}",
            "alerts.rules[0] (r): scope_name='tttt",
        ),
        (
            'alerts: {channels: [{name: w, kind: webhook, url_env: "A\\0B"}]}\n',
            "alerts.channels[0] (w): url_env='A\\x00B': not a variable name",
        ),
    ],
    ids=[
        "alias bomb", "utf-16", "NUL byte", "channels not a list", "rules not a list",
        "rule channels not a list", "rule channels nested", "rule name a list",
        "rule name too long", "scope name too long", "env name with a NUL",
    ],
)  # fmt: skip
def test_a_hostile_alerts_section_is_refused_and_nothing_loads(
    tmp_path: Path, content: bytes | str, said: str
) -> None:
    with pytest.raises(FileProblems) as refused:
        alert_rules_load(path=_file(tmp_path, content))
    assert said in str(refused.value)
    assert len(str(refused.value)) < 600
    assert not AlertRule.objects.exists() and not Channel.objects.exists()
