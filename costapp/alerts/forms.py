"""Forms of alerts; every error names the field and the value refused. The
rule checks are validation.py's, shared with the fleet file."""

from __future__ import annotations

from typing import Any

from django import forms

from analytics.errors import InvalidInput
from costapp.alerts.selectors import silenceable
from costapp.alerts.transports.pagerduty import EVENTS_URL as PAGERDUTY_EVENTS_URL
from costapp.alerts.validation import INT_BOUNDS, channel_problems, rule_problems
from costapp.forms import NamedForm
from costapp.models import AlertRule, Channel
from costapp.models.alerts import METRICS, RULE_SCOPES
from costapp.validation import float_in, int_in

CHOICE_ERROR = {"invalid_choice": "is not one of the choices"}


class _ChannelsField(forms.ModelMultipleChoiceField):
    """Channels by id, each checked to be an id before any query: past the
    id column's bigint SQLite raises OverflowError, a 500, not a refusal."""

    def _check_values(self, value: Any) -> Any:
        for pk in value:
            text = str(pk)
            if not (text.isascii() and text.isdigit() and int(text) < 2**63):
                raise forms.ValidationError(
                    self.error_messages["invalid_pk_value"], code="invalid_pk_value"
                )
        return super()._check_values(value)  # type: ignore[misc]


def add_problems(form: forms.Form, problems: list[tuple[str, str]]) -> None:
    """validation.py's (field, "value: reason") pairs as field errors."""
    for name, message in problems:
        form.add_error(name if name in form.fields else None, f"{name}={message}")


# How many existing names a refused silence or rule scope lists.
SHOWN_NAMES = 8


def unknown_name(scope: str, name: str) -> str:
    """Why ``name`` names no rule, deployment or team of ``scope`` (empty when
    it does), with the first names that exist."""
    known = silenceable(scope)
    if name in known:
        return ""
    listed = ", ".join(sorted(known)[:SHOWN_NAMES]) or "none yet"
    more = "…" if len(known) > SHOWN_NAMES else ""
    return f"no {scope} of that name (known: {listed}{more})"


class AlertRuleForm(NamedForm):
    name = forms.CharField(max_length=100)
    metric = forms.ChoiceField(choices=METRICS, error_messages=CHOICE_ERROR)
    grain = forms.ChoiceField(
        choices=[("hour", "hourly (provisional clock)"), ("day", "daily (the bill)")],
        error_messages=CHOICE_ERROR,
    )
    scope = forms.ChoiceField(choices=RULE_SCOPES, error_messages=CHOICE_ERROR)
    scope_name = forms.CharField(
        max_length=100, required=False, help_text="empty: every one"
    )
    condition = forms.ChoiceField(
        choices=[
            ("ratio", "ratio to baseline"),
            ("band", "outside the baseline band"),
            ("threshold", "absolute threshold"),
            ("anomaly", "flagged as a cost anomaly (band or sustained shift)"),
            (
                "price",
                "a known price change (rate card, commitment, effective rate), once",
            ),
        ],
        error_messages=CHOICE_ERROR,
    )
    direction = forms.ChoiceField(
        choices=[("above", "above"), ("below", "below")], error_messages=CHOICE_ERROR
    )
    ratio = forms.CharField(max_length=40, required=False, initial="1.2")
    threshold = forms.CharField(max_length=40, required=False)
    for_periods = forms.CharField(max_length=10, initial="1", label="For (periods)")
    keep_firing_for = forms.CharField(max_length=10, required=False)
    repeat_minutes = forms.CharField(max_length=10, initial="240")
    min_requests = forms.CharField(max_length=40, required=False)
    include_traffic = forms.BooleanField(required=False)
    notify_resolved = forms.BooleanField(required=False, initial=True)
    channels = _ChannelsField(
        queryset=Channel.objects.all(),
        required=False,
        error_messages={
            "invalid_choice": "is not a channel",
            "invalid_pk_value": "is not a channel",
        },
    )

    FLOATS = ("ratio", "threshold", "min_requests")
    INTS = ("for_periods", "keep_firing_for", "repeat_minutes")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in self.FLOATS + self.INTS:
            raw = (data.get(name) or "").strip() if name in data else None
            if raw in (None, ""):
                data[name] = None
                continue
            try:
                if name in self.INTS:
                    low, high = INT_BOUNDS[name]
                    data[name] = int_in(raw, field=name, minimum=low, maximum=high)
                else:
                    data[name] = float_in(raw, field=name)
            except InvalidInput as exc:
                self.add_error(name, str(exc))
                data[name] = None
        refused = set(self.errors)
        if data.get("for_periods") is None:
            data["for_periods"] = 1
        if data.get("repeat_minutes") is None:
            data["repeat_minutes"] = 240
        # Every error at once: the rule's own checks run beside the fields'
        # (a field already refused is not told twice).
        if not {"metric", "condition", "scope", "grain"} & refused:
            add_problems(
                self, [(f, m) for f, m in rule_problems(data) if f not in refused]
            )
        # A scope name that matches nothing would save a rule that never
        # fires: refused as a silence refuses it.
        scope, name = data.get("scope"), data.get("scope_name") or ""
        if scope in ("deployment", "team") and name and "scope_name" not in refused:
            unknown = unknown_name(scope, name)
            if unknown:
                self.add_error("scope_name", f"scope_name={name!r}: {unknown}")
        return data

    def rule(self, instance: AlertRule | None = None) -> AlertRule:
        """The cleaned data on a rule (unsaved): saved, or backtested."""
        rule = instance or AlertRule()
        for name in (
            "name", "metric", "grain", "scope", "scope_name", "condition",
            "direction", "ratio", "threshold", "for_periods", "keep_firing_for",
            "repeat_minutes", "min_requests", "include_traffic", "notify_resolved",
        ):  # fmt: skip
            setattr(rule, name, self.cleaned_data[name])
        return rule


class ChannelForm(NamedForm):
    # Checked address by address (channel_problems names the one refused; a
    # line break is no address); the email transport refuses one again.
    free_text_fields = ("to",)

    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=Channel.KINDS, error_messages=CHOICE_ERROR)
    to = forms.CharField(
        max_length=1000, required=False, help_text="email: addresses, comma-separated"
    )
    # "secret" in the name: the audit log stores this field masked (a Slack
    # URL is the credential).
    secret_url = forms.CharField(
        max_length=2000,
        required=False,
        label="URL",
        help_text="webhook, Slack incoming webhook, Alertmanager (its base URL) "
        "or PagerDuty (blank: the Events API v2)",
    )
    secret_routing_key = forms.CharField(
        max_length=64,
        required=False,
        label="Routing key",
        help_text="PagerDuty: the service's Events API v2 integration key",
    )

    def __init__(
        self, *args: Any, channel: Channel | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        # Editing: the stored target is never shown, so a blank field keeps it.
        self.channel = channel
        if channel is not None:
            for name in ("to", "secret_url", "secret_routing_key"):
                self.fields[name].help_text += "; leave blank to keep the stored one"

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        config: dict[str, Any] = {}
        if data["kind"] == "email":
            config["to"] = [
                a.strip() for a in data.get("to", "").split(",") if a.strip()
            ]
        else:
            config["url"] = data.get("secret_url", "").strip()
        if data["kind"] == "pagerduty":
            config["routing_key"] = data.get("secret_routing_key", "").strip()
        if self.channel is not None and not any(config.values()):
            if data["kind"] != self.channel.kind:
                target = "to" if data["kind"] == "email" else "secret_url"
                self.add_error(target, f"{target}='': a new kind needs its target")
            data["config"] = None  # unchanged
            return data
        if data["kind"] == "pagerduty" and not config["url"]:
            config["url"] = PAGERDUTY_EVENTS_URL
        for name, message in channel_problems(data["kind"], config):
            if name in ("url", "routing_key"):  # the form's secret_ fields
                self.add_error(f"secret_{name}", f"secret_{name}={message}")
            else:
                add_problems(self, [(name, message)])
        data["config"] = config
        return data


class SilenceForm(NamedForm):
    free_text_fields = ("comment",)  # shown on the page only, never sent

    scope = forms.ChoiceField(
        choices=[("rule", "rule"), ("deployment", "deployment"), ("team", "team")],
        error_messages=CHOICE_ERROR,
    )
    # Offers the names that exist (the page's datalist) as the user types.
    name = forms.CharField(
        max_length=100, widget=forms.TextInput(attrs={"list": "silenceable"})
    )
    hours = forms.CharField(max_length=10, initial="4", label="For (hours)")
    comment = forms.CharField(max_length=300, required=False)

    def clean_hours(self) -> int:
        try:
            return int_in(
                self.cleaned_data["hours"], field="hours", minimum=1, maximum=24 * 90
            )
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self) -> dict[str, Any]:
        """A silence names a rule, deployment or team that exists: a typo
        would otherwise silence nothing while the page says it did, and the
        on-call engineer who set it would keep being paged."""
        data = super().clean() or {}
        scope, name = data.get("scope"), data.get("name")
        if scope is None or not name:
            return data
        unknown = unknown_name(scope, name)
        if unknown:
            self.add_error("name", unknown)
        return data
