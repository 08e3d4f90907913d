"""Issue 28: channel targets encrypted and masked for everyone, edits that keep
the target, COSTAPP_SECRET_KEYS required in production, rotation from any
starting state, and no alerts worker (nor a clean ``check --deploy``) while a
secret cannot be decrypted."""

from __future__ import annotations

import importlib
import io
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.apps import apps
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.test import Client

from costapp.alerts.checks import secret_keys_check, worker_start_refusal
from costapp.alerts.delivery import delivery_send
from costapp.alerts.secrets import (
    SecretError,
    config_decrypt,
    config_secrets,
    derived_key,
    scrub,
    target_mask,
    url_mask,
)
from costapp.alerts.services import channel_upsert
from costapp.models import AlertRule, Channel, Delivery
from tests.alerts.conftest import event_delivery
from tests.foundation.test_deploy_check import (
    deploy_check,
    readme_production_environment,
)
from tests.support.receiver import receiver
from tests.support.users import user_in

ROOT = Path(__file__).resolve().parents[2]
DEVELOPMENT = "costapp-insecure-development-key"
OLD_SECRET_KEY = "o" * 20 + "Zq8v2mLr7TyXw3nBp5sD1fGh6jKa9cEo4uIiQ0W"
NEW_SECRET_KEY = "n" * 20 + "Zq8v2mLr7TyXw3nBp5sD1fGh6jKa9cEo4uIiQ0W"
TOKEN = "tok3nQ9vX2mLr7TyXw3nBp5s"
HOOK = f"https://hooks.example.com/in?token={TOKEN}"
SLACK = "https://hooks.slack.com/services/T0AAAA/B0BBBB/s1ackPartAbCdEfGhIjKXYZ9"


def _key() -> str:
    return Fernet.generate_key().decode()


def _out() -> io.StringIO:
    return io.StringIO()


# --- masks ---------------------------------------------------------------------


def test_a_hook_url_shows_its_scheme_host_and_last_four_characters() -> None:
    assert target_mask(SLACK) == "https://hooks.slack.com/…/XYZ9"
    assert target_mask(HOOK) == "https://hooks.example.com/…/Bp5s"
    discord = "https://discord.com/api/webhooks/1234567/AbCdEfGhIjKlMnOp"
    assert target_mask(discord) == "https://discord.com/…/MnOp"
    chat = (
        "https://chat.googleapis.com/v1/spaces/A/messages?key=K&token=T0K3Nx9AbCdEfGh1"
    )
    assert target_mask(chat) == "https://chat.googleapis.com/…/fGh1"
    # A last piece too short to hide behind four shown characters: none shown.
    assert target_mask("https://hooks.slack.com/services/T/B/zzz") == (
        "https://hooks.slack.com/…"
    )
    assert target_mask("https://example.com/h") == "https://example.com/…"
    # Credentials before the host never show.
    assert target_mask("https://user:pw@example.com/hook/abcdefgh") == (
        "https://example.com/…"
    )


def test_a_url_with_a_query_and_no_path_is_masked_too() -> None:
    assert url_mask(f"https://example.com?token={TOKEN}") == "https://example.com/…"


def test_a_token_in_the_query_is_scrubbed_from_errors_alone() -> None:
    secrets = config_secrets({"url": HOOK})
    assert TOKEN not in scrub(f"receiver said: bad token {TOKEN}", secrets=secrets)
    assert "/in?token=" not in scrub(f"POST /in?token={TOKEN} 500", secrets=secrets)


# --- targets at rest and on the pages -----------------------------------------


def _row_text(channel: Channel) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM costapp_channel WHERE id = %s", [channel.pk])
        return " ".join(str(v) for v in cursor.fetchone())


@pytest.mark.django_db
def test_a_webhook_target_is_stored_encrypted_with_only_its_mask_in_clear() -> None:
    channel = channel_upsert(name="ops", kind="webhook", config={"url": HOOK}).channel
    raw = _row_text(channel)
    assert TOKEN not in raw and "hooks.example.com/in" not in raw
    assert channel.target_masked == "https://hooks.example.com/…/Bp5s"
    assert config_decrypt(channel.config_encrypted)["url"] == HOOK


@pytest.mark.django_db
def test_the_migration_masks_a_clear_webhook_target_and_keeps_addresses() -> None:
    migration = importlib.import_module(
        "costapp.migrations.0019_channel_targets_masked"
    )
    hook = Channel.objects.create(
        name="h", kind="webhook", config_encrypted="x", target_masked=HOOK
    )
    mail = Channel.objects.create(
        name="m", kind="email", config_encrypted="x", target_masked="a@b.co"
    )
    slack = Channel.objects.create(
        name="s", kind="slack", config_encrypted="x", target_masked="https://h/…"
    )
    migration.targets_mask(apps, None)
    assert Channel.objects.get(pk=hook.pk).target_masked == target_mask(HOOK)
    assert Channel.objects.get(pk=mail.pk).target_masked == "a@b.co"
    assert Channel.objects.get(pk=slack.pk).target_masked == "https://h/…"


def _client(username: str, group: str) -> Client:
    client = Client()
    client.force_login(user_in(username, group))
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("group", ["tech lead", "admin"])
def test_a_target_is_shown_masked_to_a_tech_lead_and_to_an_admin(group: str) -> None:
    hook = channel_upsert(name="ops", kind="webhook", config={"url": HOOK}).channel
    slack = channel_upsert(name="chat", kind="slack", config={"url": SLACK}).channel
    client = _client("someone", group)
    pages = [client.get("/alerts/channels/").content.decode()] + [
        client.get(f"/alerts/channels/{c.pk}/").content.decode() for c in (hook, slack)
    ]
    for page in pages:
        assert TOKEN not in page and "s1ackPart" not in page and "T0AAAA" not in page
    assert "https://hooks.example.com/…/Bp5s" in pages[0]
    assert "https://hooks.slack.com/…/XYZ9" in pages[0]
    secret = config_decrypt(hook.config_encrypted)["secret"]
    assert secret not in pages[1] and secret[-4:] in pages[1]


@pytest.mark.django_db
def test_editing_a_channel_without_retyping_the_target_keeps_it() -> None:
    channel = channel_upsert(name="ops", kind="webhook", config={"url": HOOK}).channel
    before = config_decrypt(channel.config_encrypted)
    admin = _client("boss", "admin")
    page = admin.get(f"/alerts/channels/{channel.pk}/").content.decode()
    assert "leave blank to keep the stored one" in page
    response = admin.post(
        f"/alerts/channels/{channel.pk}/",
        {"action": "edit", "name": "ops-renamed", "kind": "webhook", "secret_url": ""},
    )
    assert response.status_code == 302
    row = Channel.objects.get(pk=channel.pk)
    assert row.name == "ops-renamed"
    assert config_decrypt(row.config_encrypted) == before
    # A new URL replaces the old one; the signing secret stays.
    new_url = "https://hooks.example.com/in?token=an0th3rT0kenValue42"
    admin.post(
        f"/alerts/channels/{channel.pk}/",
        {
            "action": "edit",
            "name": "ops-renamed",
            "kind": "webhook",
            "secret_url": new_url,
        },
    )
    after = config_decrypt(Channel.objects.get(pk=channel.pk).config_encrypted)
    assert after["url"] == new_url and after["secret"] == before["secret"]
    # A new kind has no stored target to keep.
    page = admin.post(
        f"/alerts/channels/{channel.pk}/",
        {"action": "edit", "name": "ops-renamed", "kind": "slack", "secret_url": ""},
    ).content.decode()
    assert "a new kind needs its target" in page
    assert Channel.objects.get(pk=channel.pk).kind == "webhook"
    # A tech lead edits it too (on-call owns its routes), and the stored
    # target and secret are kept the same way; rotating the secret is not
    # theirs.
    lead = _client("lead", "tech lead")
    response = lead.post(
        f"/alerts/channels/{channel.pk}/",
        {"action": "edit", "name": "mine", "kind": "webhook", "secret_url": ""},
    )
    assert response.status_code == 302
    assert Channel.objects.get(pk=channel.pk).name == "mine"
    assert config_decrypt(Channel.objects.get(pk=channel.pk).config_encrypted) == after
    rotate = lead.post(f"/alerts/channels/{channel.pk}/", {"action": "rotate"})
    assert rotate.status_code == 403


# --- keys ------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_new_secret_key_with_new_and_old_secret_keys_keeps_delivery_working(
    settings: Any, rule: AlertRule, loopback: None
) -> None:
    old, new = _key(), _key()
    settings.SECRET_KEY, settings.COSTAPP_SECRET_KEYS = OLD_SECRET_KEY, [old]
    with receiver() as rx:
        url = f"{rx.url}?token={TOKEN}"
        channel = channel_upsert(name="h", kind="webhook", config={"url": url}).channel
        settings.SECRET_KEY, settings.COSTAPP_SECRET_KEYS = NEW_SECRET_KEY, [new, old]
        outcome = delivery_send(delivery_id=event_delivery(rule, channel).pk)
        assert outcome is not None and outcome.status == Delivery.SENT, outcome
        assert rx.received[0].path.endswith(TOKEN)


@pytest.mark.django_db
def test_a_new_secret_key_with_the_old_one_in_fallbacks_keeps_delivery_working(
    settings: Any, rule: AlertRule, loopback: None
) -> None:
    settings.SECRET_KEY, settings.COSTAPP_SECRET_KEYS = OLD_SECRET_KEY, []
    with receiver() as rx:
        channel = channel_upsert(
            name="h", kind="webhook", config={"url": rx.url}
        ).channel
        settings.SECRET_KEY = NEW_SECRET_KEY
        settings.COSTAPP_SECRET_KEYS = [_key()]
        with pytest.raises(SecretError, match="COSTAPP_SECRET_KEYS=NEW,OLD"):
            config_decrypt(channel.config_encrypted)
        settings.SECRET_KEY_FALLBACKS = [OLD_SECRET_KEY]
        outcome = delivery_send(delivery_id=event_delivery(rule, channel).pk)
        assert outcome is not None and outcome.status == Delivery.SENT, outcome


def _rotate() -> str:
    out = _out()
    call_command("alerts_secrets_rotate", stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_rotation_from_the_development_key_moves_everything_under_the_first_key(
    settings: Any,
) -> None:
    settings.SECRET_KEY, settings.COSTAPP_SECRET_KEYS = DEVELOPMENT, []
    channel = channel_upsert(name="s", kind="slack", config={"url": SLACK}).channel
    new = _key()
    settings.SECRET_KEY, settings.COSTAPP_SECRET_KEYS = NEW_SECRET_KEY, [new]
    # The published key decrypts nothing outside rotation.
    with pytest.raises(SecretError):
        config_decrypt(channel.config_encrypted)
    out = _rotate()
    assert (
        "1 channel(s) re-encrypted under COSTAPP_SECRET_KEYS[1] (1 from the key "
        "derived from the development SECRET_KEY)" in out
    )
    assert "published development key" in out and "'s'" in out
    token = Channel.objects.get(pk=channel.pk).config_encrypted
    assert Fernet(new.encode()).decrypt(token.encode())
    assert "0 channel(s) re-encrypted" in _rotate()  # done: nothing left to move


@pytest.mark.django_db
def test_rotation_from_the_secret_key_derived_key_after_setting_secret_keys(
    settings: Any,
) -> None:
    """The issue's InvalidToken: secrets under the SECRET_KEY-derived key, then
    COSTAPP_SECRET_KEYS set and the rotation run."""
    settings.SECRET_KEY, settings.COSTAPP_SECRET_KEYS = OLD_SECRET_KEY, []
    channel = channel_upsert(name="m", kind="email", config={"to": ["a@b.co"]}).channel
    new = _key()
    settings.COSTAPP_SECRET_KEYS = [new]
    out = _rotate()
    assert "(1 from the key derived from SECRET_KEY)" in out
    settings.SECRET_KEY = NEW_SECRET_KEY  # SECRET_KEY no longer matters
    row = Channel.objects.get(pk=channel.pk)
    assert config_decrypt(row.config_encrypted) == {"to": ["a@b.co"]}


@pytest.mark.django_db
def test_rotation_from_a_key_list_reports_how_many_came_from_each_key(
    settings: Any,
) -> None:
    k1, k2, new = _key(), _key(), _key()
    settings.COSTAPP_SECRET_KEYS = [k2]
    channel_upsert(name="a", kind="email", config={"to": ["a@b.co"]})
    settings.COSTAPP_SECRET_KEYS = [k1, k2]
    channel_upsert(name="b", kind="email", config={"to": ["b@b.co"]})
    settings.COSTAPP_SECRET_KEYS = [new, k1, k2]
    channel_upsert(name="c", kind="email", config={"to": ["c@b.co"]})
    out = _rotate()
    assert (
        "2 channel(s) re-encrypted under COSTAPP_SECRET_KEYS[1] "
        "(1 from COSTAPP_SECRET_KEYS[2], 1 from COSTAPP_SECRET_KEYS[3]); "
        "1 already under it; 0 not decrypted"
    ) in out
    settings.COSTAPP_SECRET_KEYS = [new]
    for row in Channel.objects.all():
        assert config_decrypt(row.config_encrypted)["to"]


@pytest.mark.django_db
def test_rotation_with_an_unknown_key_lists_the_channel_and_the_fix(
    settings: Any,
) -> None:
    lost, new = _key(), _key()
    settings.COSTAPP_SECRET_KEYS = [lost]
    stranded = channel_upsert(name="pager", kind="slack", config={"url": SLACK})
    settings.COSTAPP_SECRET_KEYS = [new]
    channel_upsert(name="mail", kind="email", config={"to": ["a@b.co"]})
    out = _out()
    with pytest.raises(CommandError) as refused:
        call_command("alerts_secrets_rotate", stdout=out)
    message = str(refused.value)
    assert "'pager' (encrypted 20" in message and "UTC)" in message
    assert "COSTAPP_SECRET_KEYS=NEW,OLD" in message
    assert (
        "SECRET_KEY_FALLBACKS" in message and "alerts_secrets_rotate again" in message
    )
    assert "1 already under it; 1 not decrypted" in out.getvalue()
    row = Channel.objects.get(name="pager")
    assert row.config_encrypted == stranded.channel.config_encrypted  # untouched
    settings.COSTAPP_SECRET_KEYS = [new, lost]  # the fix, as the message says
    assert "1 channel(s) re-encrypted" in _rotate()


# --- check --deploy ------------------------------------------------------------


@pytest.mark.django_db
def test_check_deploy_fails_while_a_secret_cannot_be_decrypted(settings: Any) -> None:
    lost, new = _key(), _key()
    settings.COSTAPP_SECRET_KEYS = [lost]
    channel_upsert(name="pager", kind="slack", config={"url": SLACK})
    settings.COSTAPP_SECRET_KEYS = [new]
    with pytest.raises(SystemCheckError) as failed:
        call_command("check", deploy=True, fail_level="ERROR", stdout=_out())
    message = str(failed.value)
    assert "costapp.E102" in message and "'pager'" in message
    assert "COSTAPP_SECRET_KEYS=NEW,OLD" in message
    assert "alerts_secrets_rotate" in message
    # The old key back: it works, and the check says to finish the rotation.
    settings.COSTAPP_SECRET_KEYS = [new, lost]
    ids = [m.id for m in secret_keys_check()]
    assert ids == ["costapp.W101"]
    _rotate()
    assert secret_keys_check() == []


@pytest.mark.django_db
def test_missing_secret_keys_are_a_deploy_error_only_with_debug_off(
    settings: Any,
) -> None:
    settings.COSTAPP_SECRET_KEYS = []
    settings.DEBUG = False
    (error,) = secret_keys_check()
    assert error.id == "costapp.E101" and "COSTAPP_SECRET_KEYS" in error.msg
    settings.DEBUG = True
    assert secret_keys_check() == []


def test_the_production_environment_without_secret_keys_fails_check_deploy(
    tmp_path: Path,
) -> None:
    key = tmp_path / "key"
    key.write_text("k" * 10 + "Zq8v2mLr7TyXw3nBp5sD1fGh6jKa9cEo4uIiQ0WzxRtYvNbMl\n")
    env = readme_production_environment(key)
    del env["COSTAPP_SECRET_KEYS_FILE"]
    result = deploy_check(env)
    assert result.returncode != 0
    assert "costapp.E101" in result.stderr + result.stdout
    assert "COSTAPP_SECRET_KEYS is not set" in result.stderr + result.stdout


# --- the alerts worker ---------------------------------------------------------


@pytest.mark.django_db
def test_the_worker_start_check_refuses_only_the_alerts_queue_and_says_why(
    settings: Any,
) -> None:
    settings.COSTAPP_SECRET_KEYS = [_key()]
    channel_upsert(name="fine", kind="email", config={"to": ["a@b.co"]})
    assert worker_start_refusal(["alerts"]) is None
    settings.COSTAPP_SECRET_KEYS = [_key()]
    refusal = worker_start_refusal(["alerts", "celery"])
    assert refusal is not None
    assert "not starting" in refusal and "'fine'" in refusal
    assert (
        "COSTAPP_SECRET_KEYS=NEW,OLD" in refusal and "alerts_secrets_rotate" in refusal
    )
    # Ingestion and the live steps need no channel secret.
    assert worker_start_refusal(["celery", "live"]) is None


@pytest.mark.django_db
def test_the_worker_start_check_refuses_secrets_under_the_development_key(
    settings: Any,
) -> None:
    settings.SECRET_KEY, settings.COSTAPP_SECRET_KEYS = DEVELOPMENT, []
    channel_upsert(name="old", kind="email", config={"to": ["a@b.co"]})
    assert worker_start_refusal(["alerts"]) is None  # a laptop: the one key
    settings.SECRET_KEY, settings.COSTAPP_SECRET_KEYS = NEW_SECRET_KEY, [_key()]
    refusal = worker_start_refusal(["alerts"])
    assert refusal and "published development SECRET_KEY" in refusal
    assert "run manage.py alerts_secrets_rotate" in refusal
    _rotate()
    assert worker_start_refusal(["alerts"]) is None


@pytest.mark.integration
def test_a_real_alerts_worker_exits_non_zero_with_the_rotation_steps(
    postgres_only: None, transactional_db: None, redis_url: str, settings: Any
) -> None:
    from tests.costs.test_backfill_worker_kill import database_url

    settings.COSTAPP_SECRET_KEYS = [_key()]
    channel_upsert(name="pager", kind="email", config={"to": ["a@b.co"]})
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "costapp.settings",
        "COSTAPP_SECRET_KEYS": _key(),  # not the key the channel is under
    }
    result = subprocess.run(
        [str(Path(sys.executable).parent / "celery"), "-A", "costapp", "worker",
         "-Q", "alerts", "--pool=solo", "--without-gossip", "--without-mingle"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode != 0
    assert "not starting" in result.stderr and "'pager'" in result.stderr
    assert "alerts_secrets_rotate" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr


# --- the demo's key --------------------------------------------------------------


def test_the_demo_makes_its_own_secret_key_once_and_keeps_it_owner_only(
    tmp_path: Path,
) -> None:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SECRET_", "DEBUG"))
    }
    env.update(COSTAPP_DEMO="true", COSTAPP_VAR_DIR=str(tmp_path / "var"))
    env["DJANGO_SETTINGS_MODULE"] = "costapp.settings"
    program = "from django.conf import settings; print(settings.SECRET_KEY)"

    def secret_key() -> str:
        result = subprocess.run(
            [sys.executable, "-c", program],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return result.stdout.strip()

    first = secret_key()
    path = tmp_path / "var" / "demo_secret_key"
    assert first != DEVELOPMENT and len(first) >= 50
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == first
    assert secret_key() == first  # kept: the demo's secrets still decrypt
    assert derived_key(first) != derived_key(DEVELOPMENT)
