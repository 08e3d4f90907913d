"""schemathesis against the served schema: the app on a loopback port over
the demo fleet, a token in the header, every check schemathesis has: no 5xx,
nothing outside the schema (status codes, content types, headers, bodies),
every request the schema calls invalid refused (an empty ?start= among them)
and every one it calls valid accepted, apart from those breaking a rule the
schema cannot state (docs/api.md), which tests/api/schemathesis_hooks.py
drops by the rule's name."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import requests
import time_machine

from costapp.api.tokens import api_token_create
from costapp.economics.unit_costs.services import unit_costs_recompute
from costapp.models import AlertEvent, AlertRule, AlertState, Budget, Deployment
from tests.support.demo_data import demo_load
from tests.support.users import user_in

END = datetime(2026, 11, 30, tzinfo=UTC)
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")


def seed() -> str:
    demo_load(end=END, days=8)
    unit_costs_recompute(now=END)
    Budget.objects.create(scope="fleet", name="fleet", monthly_amount=Decimal("90000"))
    rule = AlertRule.objects.create(
        name="up", metric="cost_per_1k_requests", grain="day", ratio=1.2
    )
    AlertEvent.objects.create(
        rule=rule, scope_name="chat", kind="firing", data_time=END - timedelta(days=2),
        value=1.5, baseline=1.0, created_at=END - timedelta(days=1),
    )  # fmt: skip
    AlertState.objects.create(rule=rule, scope_name="chat", state="firing", since=END)
    user = user_in("schemathesis", "tech lead")
    return api_token_create(
        user=user, name="st", scopes=["api"], expires_at=END + timedelta(days=30)
    ).secret


@pytest.mark.integration
@pytest.mark.long
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    transactional_db: None, live_server: Any, tmp_path: Path
) -> None:
    with time_machine.travel(END + timedelta(hours=6), tick=True):
        secret = seed()
        schema_url = f"{live_server.url}/api/v1/schema/"
        auth = f"Authorization: Bearer {secret}"
        # The schema is served to the token, and it covers every endpoint.
        schema = requests.get(
            schema_url, headers={"Authorization": f"Bearer {secret}"}, timeout=30
        ).json()
        assert sorted(schema["paths"]) == [
            "/api/v1/alerts/active/", "/api/v1/alerts/events/", "/api/v1/baselines/",
            "/api/v1/budgets/", "/api/v1/idle/", "/api/v1/moved/",
            "/api/v1/overview/", "/api/v1/rightsizing/", "/api/v1/spend/",
            "/api/v1/unit-costs/",
        ]  # fmt: skip
        dropped = tmp_path / "dropped.txt"
        run = subprocess.run(
            [
                str(Path(sys.executable).with_name("schemathesis")),
                "run",
                schema_url,
                "-H",
                auth,
                "--checks",
                "all",
                "--phases",
                "coverage,fuzzing",
                "--max-examples",
                "10",
                "--seed",
                "12",
                "--workers",
                "1",
                "--request-timeout",
                "30",
                "--generation-database",
                "none",
                "--no-color",
                "--report",
                "junit",
                "--report-dir",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            # Ten operations, every check: 80 to 110 s on two shared CPUs, as
            # long as the six checks before them (220 s once, under load).
            timeout=420,
            cwd=tmp_path,
            env={**os.environ, **hook_env(dropped)},
        )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    # Both phases ran every operation (the coverage phase's boundary and
    # invalid values, then random ones).
    assert output.count(f"✅ {len(schema['paths'])} passed") == 2, output[-3000:]
    assert "No issues found" in output, output[-3000:]
    # The hook dropped valid cases breaking a rule in both phases: schemathesis
    # applied it in each. A phase that ignored it (as the coverage phase does
    # filter_query) fails here even where its seed sends no such case.
    lines = dropped.read_text().splitlines() if dropped.exists() else []
    assert {line.split()[0] for line in lines} == {"coverage", "fuzzing"}, lines


def hook_env(dropped: Path) -> dict[str, str]:
    """What tests/api/schemathesis_hooks.py reads: the server's day (the
    default windows end there) and the fleet's names."""
    fleet = Deployment.objects.all()
    return {
        "SCHEMATHESIS_HOOKS": str(HOOKS),
        "COSTAPP_ST_TODAY": END.date().isoformat(),
        "COSTAPP_ST_TEAMS": ",".join(sorted({d.team for d in fleet if d.team})),
        "COSTAPP_ST_DEPLOYMENTS": ",".join(sorted(d.name for d in fleet)),
        "COSTAPP_ST_DROPPED": str(dropped),
    }
