"""The Prometheus rules generated from the fleet file's SLOs: shipped for the
demo fleet, loaded by compose's Prometheus, valid for promtool, and firing
when (and only when) more than 5% of requests are over the SLO's edge."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from costapp.sources.engine_buckets import VLLM_BUCKETS
from costapp.telemetry.prometheus_rules import (
    edge_at_or_below,
    le_label,
    rules_document,
)
from tests.support.services import require_binary

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deploy" / "costapp_rules.yml"
DEMO_FLEET = ROOT / "costapp" / "fleet" / "demo_fleet.yaml"


def test_the_shipped_file_is_what_the_demo_fleet_file_generates(
    tmp_path: Path,
) -> None:
    out = tmp_path / "rules.yml"
    call_command("prometheus_rules", str(DEMO_FLEET), out=str(out))
    assert out.read_text() == SHIPPED.read_text(), (
        "regenerate: manage.py prometheus_rules costapp/fleet/demo_fleet.yaml "
        "--out deploy/costapp_rules.yml"
    )
    prometheus = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    assert prometheus["rule_files"] == ["/etc/prometheus/costapp_rules.yml"]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert (
        "./deploy/costapp_rules.yml:/etc/prometheus/costapp_rules.yml:ro"
        in compose["services"]["prometheus"]["volumes"]
    )


def promtool_passes(promtool: str, *args: str) -> None:
    done = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_checks_the_shipped_rules() -> None:
    promtool = require_binary("promtool")
    promtool_passes(promtool, "check", "rules", str(SHIPPED))
    groups = yaml.safe_load(SHIPPED.read_text())["groups"]
    chat = next(g for g in groups if g["name"] == "costapp-chat")
    assert [r["alert"] for r in chat["rules"]] == [
        "CostappTTFTSLO",
        "CostappITLSLO",
        "CostappPreempting",
        "CostappKVCacheHigh",
    ]


def test_the_slo_is_taken_at_the_edge_at_or_below_it() -> None:
    assert edge_at_or_below(VLLM_BUCKETS["ttft"], 1.0) == 1.0
    assert edge_at_or_below(VLLM_BUCKETS["itl"], 0.06) == 0.05
    assert edge_at_or_below(VLLM_BUCKETS["ttft"], 0.0005) is None
    # What the Python client writes in le.
    assert [le_label(e) for e in (1.0, 0.05, 10.0)] == ["1.0", "0.05", "10.0"]


def _ttft_series(over_per_min: int, under_per_min: int) -> list[dict[str, str]]:
    """chat's TTFT histogram for an hour: ``under`` requests a minute within
    1.0 s, ``over`` above it (counters stepping each minute)."""
    sel = 'namespace="assistant",app="chat"'
    name = "vllm:time_to_first_token_seconds"
    total = over_per_min + under_per_min
    return [
        {
            "series": f'{name}_bucket{{{sel},le="1.0"}}',
            "values": f"0+{under_per_min}x60",
        },
        {
            "series": f'{name}_bucket{{{sel},le="+Inf"}}',
            "values": f"0+{total}x60",
        },
        {"series": f"{name}_count{{{sel}}}", "values": f"0+{total}x60"},
    ]


@pytest.mark.parametrize(("over", "fires"), [(10, True), (2, False)])
def test_the_ttft_rule_fires_over_5_percent_of_requests_and_not_under(
    tmp_path: Path, over: int, fires: bool
) -> None:
    promtool = require_binary("promtool")
    expected = (
        [
            {
                "exp_labels": {
                    "source": "costapp",
                    "severity": "warning",
                    "deployment": "chat",
                    "team": "assistant",
                },
            }
        ]
        if fires
        else []
    )
    alerts = [
        {"eval_time": "30m", "alertname": "CostappTTFTSLO", "exp_alerts": expected}
    ]
    if fires:
        # The annotations say what was measured; only the labels are matched
        # here, so the expected annotations are read from the rule.
        rule = next(
            r
            for g in yaml.safe_load(SHIPPED.read_text())["groups"]
            for r in g["rules"]
            if g["name"] == "costapp-chat" and r["alert"] == "CostappTTFTSLO"
        )
        share = over / (over + 100)
        expected[0]["exp_annotations"] = {
            "summary": rule["annotations"]["summary"],
            "description": rule["annotations"]["description"].replace(
                "{{ $value | humanizePercentage }}", f"{share * 100:.4g}%"
            ),
        }
    test = {
        "rule_files": [str(SHIPPED)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": _ttft_series(over, 100),
                "alert_rule_test": alerts,
            }
        ],
    }
    path = tmp_path / "test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False, allow_unicode=True))
    promtool_passes(promtool, "test", "rules", str(path))


def _disaggregated(prefill_selector: str) -> dict[str, Any]:
    return {
        "name": "chat-pd",
        "team": "assistant",
        "engine": "vllm",
        "prometheus_selector": 'namespace="assistant"',
        "prefill_selector": prefill_selector,
        "slo": {"ttft_p95_ms": 1000},
    }


def test_a_disaggregated_deployments_slo_is_its_decode_engines(tmp_path: Path) -> None:
    """The prefill engines answer their one-token requests fast: read with
    the decode engines, 100 of them a minute would hide 10% of requests
    over the SLO. The rule reads the decode engines only, and fires."""
    promtool = require_binary("promtool")
    rules = tmp_path / "rules.yml"
    rules.write_text(
        rules_document([_disaggregated('pod=~"chat-prefill-.*"')], source="f.yaml")
    )
    assert 'pod!~"chat-prefill-.*"' in rules.read_text()
    name = "vllm:time_to_first_token_seconds"
    series = []
    for pod, over, under in (("chat-prefill-0", 0, 100), ("chat-decode-0", 10, 90)):
        sel = f'namespace="assistant",pod="{pod}"'
        series += [
            {"series": f'{name}_bucket{{{sel},le="1.0"}}', "values": f"0+{under}x60"},
            {
                "series": f'{name}_bucket{{{sel},le="+Inf"}}',
                "values": f"0+{over + under}x60",
            },
            {"series": f"{name}_count{{{sel}}}", "values": f"0+{over + under}x60"},
        ]
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": 'ALERTS{alertname="CostappTTFTSLO"}',
                        "eval_time": "30m",
                        "exp_samples": [
                            {
                                "labels": (
                                    'ALERTS{alertname="CostappTTFTSLO",'
                                    'alertstate="firing",deployment="chat-pd",'
                                    'severity="warning",source="costapp",'
                                    'team="assistant"}'
                                ),
                                "value": 1,
                            }
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    promtool_passes(promtool, "test", "rules", str(path))


def test_a_prefill_selector_of_several_matchers_says_why_no_slo_rule() -> None:
    text = rules_document([_disaggregated('role="prefill",zone="a"')], source="f.yaml")
    assert "# Not written: chat-pd: TTFT SLO not written: its prefill_selector" in text
    assert "CostappTTFTSLO" not in text
    assert "CostappKVCacheHigh" in text  # both pools' KV cache still watched
