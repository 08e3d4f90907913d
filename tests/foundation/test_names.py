"""A name holds one line (issue 28): a channel, rule or team name with a line
break, a control character or a bidi override is refused, naming the field
and the value, by the forms, the fleet file and the admin, all through the
one rule ``costapp.validation.name_problem``."""

from __future__ import annotations

from html import unescape
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from costapp.alerts.fleetfile import alert_rules_load
from costapp.alerts.forms import AlertRuleForm, ChannelForm, SilenceForm
from costapp.economics.forms import BudgetForm
from costapp.fleet.fleetfile import fleet_load, fleet_validate
from costapp.models import AlertRule, Channel, Deployment
from costapp.validation import free_text_problem, name_problem
from costapp.yamlfile import FileProblems
from tests.alerts.test_pages import RULE
from tests.fleet.test_admin_deployment import EXAMPLE, _post_data
from tests.support.fuzz import VALUES
from tests.support.users import user_in

HEADER = "a\r\nBcc: evil@example.com"
SAID = "='a\\r\\nBcc: evil@example.com': contains a line break (U+000D)"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("chat-70b", None),
        ("équipe données ✓", None),
        ("it's <b>&</b>", None),  # markup is escaped where it is shown, not refused
        (HEADER, "contains a line break (U+000D)"),
        ("a\nb", "contains a line break (U+000A)"),
        ("a\u2028b", "contains a line break (U+2028)"),
        ("a\u2029b", "contains a line break (U+2029)"),
        ("a\tb", "contains a control character (U+0009)"),
        ("a\x7fb", "contains a control character (U+007F)"),
        ("a\x9bb", "contains a control character (U+009B)"),
        ("a\u202ab", "contains a bidirectional control (U+202A)"),
        ("a\u2069b", "contains a bidirectional control (U+2069)"),
        ("a\x00b", "contains a NUL byte"),
    ],
)
def test_the_name_rule(value: str, problem: str | None) -> None:
    assert name_problem(value) == problem


def test_free_text_keeps_its_lines_but_not_the_rest() -> None:
    assert free_text_problem("one\r\ntwo\tthree\u2028four") is None
    assert free_text_problem("a\x0bb") == "contains a control character (U+000B)"
    assert free_text_problem("a\u202eb") == "contains a bidirectional control (U+202E)"


def test_the_fuzz_tries_every_kind_of_name_the_review_found() -> None:
    assert HEADER in VALUES
    assert any(name_problem(v) and "\u2028" in v for v in VALUES)
    assert any(any("\u202a" <= c <= "\u202e" for c in v) for v in VALUES)


def _form_errors(form: Any) -> list[str]:
    assert not form.is_valid()
    return [str(e) for errors in form.errors.values() for e in errors]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("form", "field"),
    [
        (lambda: ChannelForm({"name": HEADER, "kind": "email", "to": "a@b.co"}), "name"),
        (lambda: AlertRuleForm({**RULE, "name": HEADER}), "name"),
        (
            lambda: AlertRuleForm({**RULE, "scope": "team", "scope_name": HEADER}),
            "scope_name",
        ),
        (lambda: SilenceForm({"scope": "team", "name": HEADER, "hours": "4"}), "name"),
        (
            lambda: BudgetForm(
                {"scope": "team", "name": HEADER, "monthly_amount": "5", "currency": "USD"}
            ),
            "name",
        ),
    ],
    ids=["channel", "rule", "rule's team", "silenced team", "team budget"],
)  # fmt: skip
def test_the_forms_refuse_a_line_break_in_a_name_naming_field_and_value(
    form: Any, field: str
) -> None:
    assert _form_errors(form()) == [field + SAID]


@pytest.mark.django_db
def test_the_channel_page_refuses_it_and_saves_nothing() -> None:
    client = Client()
    client.force_login(user_in("admin-names", "admin"))
    page = client.post(
        "/alerts/channels/", {"name": HEADER, "kind": "email", "to": "a@b.co"}
    )
    assert page.status_code == 200
    assert "name" + SAID in unescape(page.content.decode())
    assert not Channel.objects.exists()


def test_the_fleet_file_refuses_a_team_or_model_name_with_a_line_break() -> None:
    entry = {"name": "chat", "model": "m\u202e", "gpu_type": "H100-SXM"}
    errors = fleet_validate(
        {"deployments": [{**entry, "team": HEADER}]}, name="fleet.yaml"
    )
    assert errors == [
        "fleet.yaml: deployments[0] (chat): team 'a\\r\\nBcc: evil@example.com': "
        "contains a line break (U+000D)",
        "fleet.yaml: deployments[0] (chat): model 'm\\u202e': "
        "contains a bidirectional control (U+202E)",
    ]


@pytest.mark.django_db
def test_a_fleet_file_with_such_a_team_loads_nothing(tmp_path: Path) -> None:
    text = EXAMPLE.read_text().replace("team: assistant", 'team: "ml\\r\\nops"', 1)
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    with pytest.raises(FileProblems) as refused:
        fleet_load(path=path)
    assert any(
        "team 'ml\\r\\nops': contains a line break (U+000D)" in e
        for e in refused.value.problems
    )
    assert not Deployment.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("section", "said"),
    [
        (
            '{channels: [{name: "a\\r\\nBcc: evil@example.com", kind: email,'
            " to: [a@b.co]}]}",
            "alerts.channels[0] ('a\\r\\nBcc: evil@example.com'): name" + SAID,
        ),
        (
            '{rules: [{name: "a\\r\\nBcc: evil@example.com", metric: daily_spend,'
            " grain: day, scope: fleet, condition: threshold, threshold: 5}]}",
            "alerts.rules[0] ('a\\r\\nBcc: evil@example.com'): name" + SAID,
        ),
        (
            '{rules: [{name: r, scope_name: "a\\r\\nBcc: evil@example.com",'
            " metric: daily_spend, grain: day, scope: team, condition: threshold,"
            " threshold: 5}]}",
            "alerts.rules[0] (r): scope_name" + SAID,
        ),
    ],
    ids=["channel", "rule", "rule's team"],
)
def test_the_alerts_section_refuses_it_and_loads_nothing(
    tmp_path: Path, section: str, said: str
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(f"alerts: {section}\n")
    with pytest.raises(FileProblems) as refused:
        alert_rules_load(path=path)
    assert said in refused.value.problems
    assert not any("\r" in e or "\n" in e for e in refused.value.problems)
    assert not AlertRule.objects.exists() and not Channel.objects.exists()


@pytest.mark.django_db
def test_the_admin_refuses_it_naming_field_and_value(admin_client: Any) -> None:
    fleet_load(path=EXAMPLE)
    chat = Deployment.objects.get(name="chat")
    response = admin_client.post(
        f"/admin/costapp/deployment/{chat.pk}/change/",
        _post_data(chat, team=HEADER),
    )
    assert response.status_code == 200  # the form again, with the error
    assert "team" + SAID in unescape(response.content.decode())
    chat.refresh_from_db()
    assert chat.team == "assistant"
    pool = admin_client.post(
        "/admin/costapp/pool/add/",
        {"name": "p", "instance_type": HEADER, "gpu_type": "H100-SXM",
         "gpus_per_node": "8", "allocation_key": "gpu_hours", "cost_rules": "[]"},
    )  # fmt: skip
    assert pool.status_code == 200
    assert "instance_type" + SAID in unescape(pool.content.decode())
