from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from costapp.alerts.fleetfile import alert_rules_load
from costapp.alerts.secrets import config_decrypt
from costapp.models import AlertRule, Channel, Deployment
from costapp.yamlfile import FileProblems

pytestmark = pytest.mark.django_db

GOOD = """
alerts:
  channels:
    - {name: oncall, kind: email, to: [oncall@example.com]}
    - {name: slack, kind: slack, url_env: TEST_SLACK_URL}
    - {name: ops, kind: webhook, url: "https://ops.example.com/hook", secret_env: TEST_WHSEC}
  rules:
    - name: drift
      metric: cost_per_1k_requests
      grain: day
      condition: ratio
      ratio: 1.2
      for: 2
      channels: [oncall, slack, ops]
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return path


def test_rules_and_channels_load_with_secrets_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_SLACK_URL", "https://hooks.slack.com/services/T/B/zzz")
    monkeypatch.setenv("TEST_WHSEC", "whsec_" + "A" * 43 + "=")
    result = alert_rules_load(path=_file(tmp_path, GOOD))
    assert sorted(result.channels) == ["oncall", "ops", "slack"]
    rule = AlertRule.objects.get(name="drift")
    assert (rule.for_periods, rule.origin, rule.channels.count()) == (2, "file", 3)
    slack = Channel.objects.get(name="slack")
    assert "zzz" not in slack.config_encrypted and "zzz" not in slack.target_masked
    assert config_decrypt(slack.config_encrypted)["url"].endswith("/zzz")
    assert result.new_secrets == {}


def test_every_problem_is_reported_at_once_and_nothing_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_SLACK_URL", raising=False)
    bad = """
alerts:
  channels:
    - {name: slack, kind: slack, url: "https://hooks.slack.com/services/T/B/x"}
    - {name: s2, kind: slack, url_env: TEST_SLACK_URL}
    - {name: ops, kind: webhook, url: "https://o.example.com", secret: whsec_x}
  rules:
    - {name: r, metric: cost_per_1m_tokens, grain: hour, condition: band, channels: [nope]}
    - {name: r2, metric: idle_cost, grain: day, condition: ratio, ratio: 0.9}
"""
    with pytest.raises(FileProblems) as caught:
        alert_rules_load(path=_file(tmp_path, bad))
    text = str(caught.value)
    for expected in (
        "alerts.channels[0] (slack): url: a Slack URL is a secret",
        "url_env='TEST_SLACK_URL': not set",
        "secret: never in the file",
        "alerts.rules[0] (r): condition: 'band': cost_per_1m_tokens has no stored band",
        "alerts.rules[1] (r2): condition: 'ratio': idle_cost has no stored baseline",
        "ratio: 0.9: a number above 1",
        "channels: 'nope' is not a channel",
    ):
        assert expected in text, text
    assert not Channel.objects.exists() and not AlertRule.objects.exists()


def test_the_fleet_load_command_loads_the_fleet_and_alerts_in_one_transaction(
    tmp_path: Path, capsys: Any
) -> None:
    fleet = """
deployments:
  - {name: chat, team: a, engine: vllm, model: m, gpu_type: H100-SXM, gpu_count: 1}
alerts:
  rules:
    - {name: r, metric: daily_spend, grain: day, condition: threshold, threshold: -5x}
"""
    with pytest.raises(CommandError, match="threshold"):
        call_command("fleet_load", str(_file(tmp_path, fleet)))
    assert not Deployment.objects.exists()  # the fleet rolled back with the alerts
    good = fleet.replace("-5x", "1000").replace("deployments:", "deployments:", 1)
    call_command("fleet_load", str(_file(tmp_path, good)))
    assert Deployment.objects.filter(name="chat").exists()
    assert AlertRule.objects.get(name="r").threshold == 1000
