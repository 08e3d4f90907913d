"""Every alerts page as each role, and absurd input refused by field and
value: no 500, nothing saved, nothing silently read as something else."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from costapp.alerts.services import channel_upsert
from costapp.models import (
    AlertEvent,
    AlertRule,
    Channel,
    Delivery,
    Deployment,
    Silence,
)
from tests.alerts.test_pages import RULE as PAGE_RULE
from tests.support.users import user_in

pytestmark = pytest.mark.django_db

RULE = {**PAGE_RULE, "action": "save"}  # the rule form, saved


_made = iter(range(10_000))


def _client(*groups: str) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user_in(f"u{next(_made)}-{'-'.join(groups)}", *groups))
    return client


def _said(response: Any) -> str:
    return html.unescape(response.content.decode())


def _setup() -> tuple[AlertRule, Channel, Silence]:
    channel = channel_upsert(name="m", kind="email", config={"to": ["a@b.co"]}).channel
    rule = AlertRule.objects.create(
        name="r0", metric="cost_per_1k_requests", grain="day", ratio=1.2
    )
    now = datetime.now(UTC)
    silence = Silence.objects.create(
        scope="team", name="x", starts_at=now, ends_at=now + timedelta(hours=3)
    )
    return rule, channel, silence


def test_each_role_gets_exactly_its_rights_on_every_alerts_page() -> None:
    rule, channel, silence = _setup()
    pages = [
        "/alerts/",
        f"/alerts/rules/{rule.pk}/",
        "/alerts/channels/",
        f"/alerts/channels/{channel.pk}/",
        "/alerts/silences/",
        "/alerts/log/",
    ]
    for groups, status in (
        (("finance",), 403),
        ((), 403),
        (("tech lead",), 200),
        (("admin",), 200),
    ):
        client = _client(*groups)
        assert [client.get(p).status_code for p in pages] == [status] * 6, groups
    anonymous = Client()
    assert {anonymous.get(p).status_code for p in pages} == {302}
    assert {anonymous.post(p, {}).status_code for p in pages} == {302}
    lead, nobody = _client("tech lead"), _client()
    # On-call makes and enables its own channels; rotating a webhook's
    # signing secret and deleting a channel stay an admin's.
    assert lead.post("/alerts/channels/", {"name": "w", "kind": "email",
                                           "to": "x@y.co"}).status_code == 302  # fmt: skip
    assert lead.post(f"/alerts/channels/{channel.pk}/",
                     {"action": "enable"}).status_code == 302  # fmt: skip
    hook = channel_upsert(
        name="h", kind="webhook", config={"url": "https://hooks.example.com/x"}
    ).channel
    for action in ("rotate", "retire", "delete"):
        url = f"/alerts/channels/{hook.pk}/"
        assert lead.post(url, {"action": action}).status_code == 403, action
    for action in ("test", "enable", "rotate", "retire", "delete"):
        url = f"/alerts/channels/{channel.pk}/"
        assert nobody.post(url, {"action": action}).status_code == 403, action
    assert nobody.post("/alerts/", RULE).status_code == 403
    assert nobody.post("/alerts/silences/", {"end": str(silence.pk)}).status_code == 403
    assert lead.post("/alerts/log/", {}).status_code == 405
    assert (
        Channel.objects.count() == 3
        and Silence.objects.get().ends_at > datetime.now(UTC)
    )


def test_deleting_a_rule_needs_the_delete_right_not_only_change(
    django_user_model: Any,
) -> None:
    from django.contrib.auth.models import Permission

    rule, _, _ = _setup()
    user = user_in("editor")
    user.user_permissions.set(
        Permission.objects.filter(codename__in=["view_alertrule", "change_alertrule"])
    )
    client = Client(raise_request_exception=False)
    client.force_login(user)
    response = client.post(f"/alerts/rules/{rule.pk}/", {"action": "delete"})
    assert response.status_code == 403
    assert AlertRule.objects.filter(pk=rule.pk).exists()


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("ratio", "1e308", "ratio='1e308': is too large"),
        ("ratio", "500", "ratio=500.0: a number above 1, at most 100"),
        ("ratio", "-5", "ratio=-5.0: a number above 1"),
        ("ratio", "NaN", "ratio='NaN': is not a finite number"),
        ("ratio", "Infinity", "ratio='Infinity': is not a finite number"),
        (
            "ratio",
            "\uff11\uff0e\uff15",
            "ratio='\uff11\uff0e\uff15': is not a plain number",
        ),
        ("ratio", "1_5", "ratio='1_5': is not a plain number"),
        ("for_periods", "\uff11", "for_periods='\uff11': is not an integer"),
        ("repeat_minutes", "1_000", "repeat_minutes='1_000': is not an integer"),
        ("min_requests", "1e300", "min_requests='1e300': is too large"),
        ("min_requests", "-1", "min_requests=-1.0: a number from 0"),
        ("name", "x" * 10_000, "name='xxxxxxxx"),
        ("name", "   ", "name='   ': This field is required."),
        ("metric", "evil", "metric='evil': is not one of the choices"),
        ("channels", "99999", "channels='99999': is not a channel"),
        # Past bigint: SQLite raised OverflowError (a 500) before the query.
        pytest.param(
            "channels",
            "9" * 20,
            f"channels='{'9' * 20}': is not a channel",
            marks=pytest.mark.smoke,
        ),
        ("channels", "-1", "channels='-1': is not a channel"),
        ("include_traffic", "maybe", "include_traffic='maybe': a checkbox"),
    ],
)
def test_a_rule_with_absurd_input_is_refused_by_field_and_value(
    field: str, value: str, said: str
) -> None:
    response = _client("tech lead").post("/alerts/", {**RULE, field: value})
    assert response.status_code == 200
    assert said in _said(response)
    assert not AlertRule.objects.exists()


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"threshold": "-100"}, "threshold=-100.0: between 0 and 1e+16"),
        ({"threshold": "1e300"}, "threshold='1e300': is too large"),
        ({"threshold": "\u0663"}, "threshold='\u0663': is not a plain number"),
        ({"metric": "budget_burn", "threshold": "-3"}, "threshold=-3.0: between 0"),
        ({"metric": "staleness", "threshold": "100000"}, "at most 8784"),
        (
            {"metric": "budget_forecast", "grain": "day", "threshold": "80"},
            "threshold=80.0: a share of the budget above 0, at most 10",
        ),
        (
            {"metric": "budget_forecast_lower", "grain": "day", "threshold": "0"},
            "threshold=0.0: a share of the budget above 0",
        ),
    ],
)
def test_thresholds_are_never_negative_and_bounded(
    extra: dict[str, str], said: str
) -> None:
    response = _client("tech lead").post(
        "/alerts/", {**RULE, "condition": "threshold", **extra}
    )
    assert said in _said(response)
    assert not AlertRule.objects.exists()


def test_a_unicode_rule_name_is_kept_as_typed() -> None:
    response = _client("tech lead").post("/alerts/", {**RULE, "name": "ünï 名前 🚨"})
    assert response.status_code == 302
    assert AlertRule.objects.get().name == "ünï 名前 🚨"


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("ftp://example.com/x", "an http(s) URL"),
        ("file:///etc/passwd", "an http(s) URL"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is loopback, link-local"),
        ("http://[::ffff:169.254.169.254]/", "link-local"),
        ("http://127.0.0.1:8000/", "127.0.0.1 is loopback"),
        ("http://localhost/", "localhost is loopback"),
        ("http://2130706433/", "127.0.0.1 is loopback"),
        ("http://0177.0.0.1/", "127.0.0.1 is loopback"),
        ("http://[::1]/", "::1 is loopback"),
        ("https://10.0.0.5/", "10.0.0.5 is not a public address"),
        ("http://u:p@example.com/", "credentials in the URL are not allowed"),
        ("http://example.com:99999/", "Port out of range"),
        ("https://exa mple.com/", "no spaces or control characters"),
    ],
)  # fmt: skip
def test_a_webhook_url_the_sender_would_refuse_is_refused_when_saved(
    url: str, said: str
) -> None:
    response = _client("admin").post(
        "/alerts/channels/", {"name": "w", "kind": "webhook", "secret_url": url}
    )
    assert response.status_code == 200
    text = _said(response)
    assert "secret_url='" in text and said in text, text[-3000:]
    assert not Channel.objects.exists()


def test_an_admitted_private_network_may_be_saved(settings: Any) -> None:
    settings.COSTAPP_WEBHOOK_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    response = _client("admin").post(
        "/alerts/channels/",
        {"name": "w", "kind": "webhook", "secret_url": "https://10.0.0.5/hook"},
    )
    assert response.status_code == 302
    assert Channel.objects.get().kind == "webhook"


@pytest.mark.parametrize(
    "to",
    ["not-an-address", "a@b.c\r\nBcc: evil@x.com", "<script>@x.co", "ünï@x.co"],
)
def test_email_addresses_are_checked_one_by_one(to: str) -> None:
    response = _client("admin").post(
        "/alerts/channels/", {"name": "w", "kind": "email", "to": f"ok@x.co, {to}"}
    )
    assert "not an email address" in _said(response)
    assert not Channel.objects.exists()


def test_the_new_channel_form_never_overwrites_an_existing_channel() -> None:
    _setup()
    response = _client("admin").post(
        "/alerts/channels/",
        {"name": "m", "kind": "webhook", "secret_url": "https://example.com/"},
    )
    assert "name='m': a channel of that name exists" in _said(response)
    assert Channel.objects.get(name="m").kind == "email"


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ({"hours": "\uff11"}, "hours='\uff11': is not an integer"),
        ({"hours": "1e3"}, "hours='1e3': is not an integer"),
        ({"hours": "0"}, "hours='0': is not between 1 and 2160"),
        ({"name": "t" * 10_000}, "name='tttt"),
        ({"scope": "galaxy"}, "scope='galaxy': is not one of the choices"),
    ],
)
def test_a_silence_with_absurd_input_is_refused(
    data: dict[str, str], said: str
) -> None:
    response = _client("tech lead").post(
        "/alerts/silences/", {"scope": "team", "name": "t", "hours": "2", **data}
    )
    assert said in _said(response)
    assert not Silence.objects.exists()


@pytest.mark.parametrize(
    ("scope", "name", "known"),
    [
        ("deployment", "chta", "chat"),
        ("team", "assistnat", "assistant"),
        ("rule", "r1", "r0"),
    ],
)
def test_a_silence_of_something_that_does_not_exist_is_refused(
    scope: str, name: str, known: str
) -> None:
    """A typo would silence nothing while the page said it had."""
    _setup()
    Deployment.objects.create(
        name="chat", team="assistant", model_name="m", gpu_type="H100-80GB"
    )
    lead = _client("tech lead")
    # The form offers what exists as the user types.
    assert f'<option value="{known}">{scope}</option>' in _said(
        lead.get("/alerts/silences/")
    )
    data = {"scope": scope, "hours": "2"}
    response = lead.post("/alerts/silences/", {**data, "name": name})
    assert f"name='{name}': no {scope} of that name (known: {known})" in _said(response)
    assert not Silence.objects.filter(name=name).exists()
    assert lead.post("/alerts/silences/", {**data, "name": known}).status_code == 302
    assert Silence.objects.filter(scope=scope, name=known).exists()


@pytest.mark.parametrize("end", ["abc", "-1", "99999999999999999", "1" * 40])
def test_ending_a_silence_that_is_not_one_says_so(end: str) -> None:
    _, _, silence = _setup()
    response = _client("tech lead").post("/alerts/silences/", {"end": end})
    text = _said(response)
    assert response.status_code == 200
    assert "end='" in text and "This field is required" not in text
    assert Silence.objects.get().ends_at == silence.ends_at


def test_the_log_names_a_refused_status_and_dates_and_shows_missing_codes() -> None:
    _, channel, _ = _setup()
    Delivery.objects.create(
        channel=channel, webhook_id="msg_p", created_at=datetime.now(UTC)
    )
    lead = _client("tech lead")
    text = _said(lead.get("/alerts/log/?status=bogus"))
    assert "status='bogus': one of pending, sending, sent, failed, not_sent" in text
    assert "msg_p" in text
    row = re.search(r'<tr data-status="pending">(.*?)</tr>', text, re.S)
    assert row is not None
    cells = re.findall(r'<td class="num">(.*?)</td>', row.group(1))
    assert cells == ["0", "—", "—"]  # attempts, code, ms: never measured
    text = _said(lead.get("/alerts/log/?start=0001-01-01&end=9999-12-31"))
    assert "start='0001-01-01': is outside the supported range" in text


def test_an_event_without_a_value_shows_it_missing_not_zero() -> None:
    rule, _, _ = _setup()
    AlertEvent.objects.create(
        rule=rule, scope_name="chat", kind="resolved", reason="stale",
        data_time=datetime.now(UTC), value=None, baseline=None,
        created_at=datetime.now(UTC),
    )  # fmt: skip
    text = _said(_client("tech lead").get(f"/alerts/rules/{rule.pk}/"))
    events = text[text.index('id="events"') :]
    cells = re.findall(r'<td class="num">(.*?)</td>', events)
    assert cells[:2] == ["—", "—"]
