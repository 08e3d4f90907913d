"""The fleet file's ``alerts:`` section: channels and rules kept in git.

Secrets never live in the file: a Slack URL and a webhook secret are named by
environment variable (``url_env``, ``secret_env``) and read at load time, then
stored encrypted. Loading is all-or-nothing and every problem is reported at
once, naming the entry, the field and the value (fleet/fleetfile.py's way).
The ``fleet_load`` and ``demo`` commands call ``fleet_load`` then
``alert_rules_load`` in one transaction, so fleet/ never imports alerts/.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction

from analytics.errors import shown
from costapp.alerts.services import channel_upsert
from costapp.alerts.transports.pagerduty import EVENTS_URL as PAGERDUTY_EVENTS_URL
from costapp.alerts.validation import channel_problems, rule_problems
from costapp.models import AlertRule, Channel
from costapp.validation import name_problem
from costapp.yamlfile import FileProblems, YamlFileError, yaml_file_load

SECTION = "alerts:"  # where a refusal's problems are, in the fleet file
# An environment variable's name (os.environ refuses one with a NUL byte).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
CHANNEL_FIELDS = {"name", "kind", "to", "backend", "url", "url_env", "secret_env"}
RULE_FIELDS = {
    "name",
    "metric",
    "grain",
    "scope",
    "scope_name",
    "condition",
    "direction",
    "ratio",
    "threshold",
    "for",
    "keep_firing_for",
    "repeat_minutes",
    "min_requests",
    "include_traffic",
    "notify_resolved",
    "enabled",
    "channels",
}


@dataclass(frozen=True)
class AlertsLoadResult:
    channels: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    # Webhook secrets created because the file named none: shown once.
    new_secrets: dict[str, str] = field(default_factory=dict)


def _label(section: str, i: int, entry: Any) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    if name and name_problem(str(name)):
        name = shown(name)  # a line break never starts a line of its own
    if name and len(str(name)) > 40:
        name = str(name)[:39] + "…"
    return f"alerts.{section}[{i}] ({name})" if name else f"alerts.{section}[{i}]"


def _text_refusal(
    entry: Any, model: type[AlertRule] | type[Channel], field: str = "name"
) -> str:
    """Why ``entry``'s ``field`` cannot be stored in ``model`` ("" when it can);
    a name is required."""
    if field == "name" and (not isinstance(entry, Mapping) or not entry.get("name")):
        return "needs a name"
    value = entry.get(field, "")
    most = getattr(model._meta.get_field(field), "max_length", 0) or 0
    if not isinstance(value, str) or "\x00" in value or len(value) > most:
        return f"{field}={shown(value)}: text of at most {most} characters"
    problem = name_problem(value)  # the product's one name rule
    return f"{field}={shown(value)}: {problem}" if problem else ""


def _channel_config(
    entry: Mapping[str, Any], where: str, errors: list[str]
) -> dict[str, Any]:
    kind = entry.get("kind")
    config: dict[str, Any] = {}
    if kind == "email":
        config["to"] = entry.get("to")
        if entry.get("backend", "smtp") not in ("smtp", "console"):
            errors.append(
                f"{where}: backend={shown(entry.get('backend'))}: smtp or console"
            )
        config["backend"] = entry.get("backend", "smtp")
    if kind == "slack" and "url" in entry:
        errors.append(f"{where}: url: a Slack URL is a secret; name it with url_env")
    if "secret" in entry:
        errors.append(f"{where}: secret: never in the file; name it with secret_env")
    for name in ("url_env", "secret_env"):
        if entry.get(name) and not ENV_NAME.fullmatch(str(entry[name])):
            errors.append(f"{where}: {name}={shown(entry[name])}: not a variable name")
            return config
    if kind in ("webhook", "slack", "alertmanager", "pagerduty"):
        url = entry.get("url") or (
            PAGERDUTY_EVENTS_URL if kind == "pagerduty" else None
        )
        if entry.get("url_env"):
            url = os.environ.get(str(entry["url_env"]))
            if not url:
                errors.append(f"{where}: url_env={shown(entry['url_env'])}: not set")
                return config
        config["url"] = url
    # A webhook's signing secret, PagerDuty's routing key: from the environment.
    if kind in ("webhook", "pagerduty") and entry.get("secret_env"):
        secret = os.environ.get(str(entry["secret_env"]))
        if not secret:
            errors.append(f"{where}: secret_env={shown(entry['secret_env'])}: not set")
        else:
            config["secret" if kind == "webhook" else "routing_key"] = secret
    for field_name, message in channel_problems(str(kind), config):
        errors.append(f"{where}: {field_name}: {message}")
    return config


def alerts_section(path: Path) -> Mapping[str, Any]:
    """The ``alerts:`` section, read by the one bounded YAML reader
    (costapp/yamlfile.py); a refused file is a FileProblems."""
    try:
        data = yaml_file_load(path, name=path.name) or {}
    except YamlFileError as exc:
        raise FileProblems(str(path), [str(exc)], section=SECTION) from None
    section = data.get("alerts") if isinstance(data, dict) else None
    return section or {}


@transaction.atomic
def alert_rules_load(*, path: str | Path) -> AlertsLoadResult:
    """Validate the alerts: section, then upsert channels and rules by name.
    Rules and channels the file once defined but no longer lists are deleted
    (the file owns them; those made in the UI are kept)."""
    path = Path(path)
    section = alerts_section(path)
    errors: list[str] = []
    if not isinstance(section, Mapping):
        raise FileProblems(str(path), ["alerts: must be a mapping"], section=SECTION)
    channels = section.get("channels") or []
    rules = section.get("rules") or []
    for key in section:
        if key not in ("channels", "rules"):
            errors.append(f"alerts: unknown key {shown(key)} (channels, rules)")
    for key, value in (("channels", channels), ("rules", rules)):
        if not isinstance(value, list):
            errors.append(f"alerts.{key}: must be a list, got {shown(value)}")
    if errors:
        raise FileProblems(str(path), errors, section=SECTION)
    configs: dict[str, tuple[str, dict[str, Any]]] = {}
    for i, entry in enumerate(channels):
        where = _label("channels", i, entry)
        refusal = _text_refusal(entry, Channel)
        if refusal:
            errors.append(f"{where}: {refusal}")
            continue
        for key in set(entry) - CHANNEL_FIELDS:
            errors.append(f"{where}: unknown field {key!r}")
        configs[str(entry["name"])] = (
            str(entry.get("kind")),
            _channel_config(entry, where, errors),
        )
    known = set(configs) | set(
        Channel.objects.filter(origin="ui").values_list("name", flat=True)
    )
    for i, entry in enumerate(rules):
        where = _label("rules", i, entry)
        refusal = _text_refusal(entry, AlertRule)
        if refusal:
            errors.append(f"{where}: {refusal}")
            continue
        refusal = _text_refusal(entry, AlertRule, "scope_name")
        if refusal:
            errors.append(f"{where}: {refusal}")
        for key in set(entry) - RULE_FIELDS:
            errors.append(f"{where}: unknown field {key!r}")
        data = {**entry, "for_periods": entry.get("for", 1)}
        for field_name, message in rule_problems(data):
            errors.append(f"{where}: {field_name}: {message}")
        names = entry.get("channels") or []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            errors.append(f"{where}: channels: {shown(names)}: a list of channel names")
            continue
        for name in names:
            if name not in known:
                errors.append(f"{where}: channels: {shown(name)} is not a channel")
    if errors:
        raise FileProblems(str(path), errors, section=SECTION)

    result = AlertsLoadResult()
    for name, (kind, config) in configs.items():
        created = channel_upsert(name=name, kind=kind, config=config, origin="file")
        result.channels.append(name)
        if created.secret:
            result.new_secrets[name] = created.secret
    Channel.objects.filter(origin="file").exclude(name__in=list(configs)).delete()
    names = []
    for entry in rules:
        rule, _ = AlertRule.objects.update_or_create(
            name=entry["name"],
            defaults={
                "metric": entry["metric"],
                "grain": entry["grain"],
                "scope": entry.get("scope", "deployment"),
                "scope_name": entry.get("scope_name", ""),
                "condition": entry.get("condition", "ratio"),
                "direction": entry.get("direction", "above"),
                "ratio": entry.get("ratio"),
                "threshold": entry.get("threshold"),
                "for_periods": entry.get("for", 1),
                "keep_firing_for": entry.get("keep_firing_for"),
                "repeat_minutes": entry.get("repeat_minutes", 240),
                "min_requests": entry.get("min_requests"),
                "include_traffic": bool(entry.get("include_traffic", False)),
                "notify_resolved": bool(entry.get("notify_resolved", True)),
                "enabled": bool(entry.get("enabled", True)),
                "origin": "file",
            },
        )
        rule.channels.set(Channel.objects.filter(name__in=entry.get("channels") or []))
        names.append(rule.name)
        result.rules.append(rule.name)
    AlertRule.objects.filter(origin="file").exclude(name__in=names).delete()
    return result
