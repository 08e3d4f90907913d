"""Forms of alerts; every error names the field and the value refused. The
rule checks are validation.py's, shared with the fleet file."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.validators import ProhibitNullCharactersValidator

from costapp.alerts.validation import channel_problems, rule_problems
from costapp.models import AlertRule, Channel
from costapp.models.alerts import METRICS, RULE_SCOPES

CHECKED = (None, "", "on", "1", "true", "True", "0", "false", "False")
CHOICE_ERROR = {"invalid_choice": "%(value)r is not one of the choices"}


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:90] + "…'"


class _Named(forms.Form):
    """A NUL byte refused naming the field and the value (Django's own
    validator names neither)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            if isinstance(field, forms.CharField | forms.ModelMultipleChoiceField):
                field.validators = [
                    v
                    for v in field.validators
                    if not isinstance(v, ProhibitNullCharactersValidator)
                ]

    def full_clean(self) -> None:
        super().full_clean()
        if not self.is_bound:
            return
        for name, field in self.fields.items():
            raw = self.data.get(name)
            if isinstance(field, forms.BooleanField) and raw not in CHECKED:
                self.cleaned_data.pop(name, None)
                self.add_error(name, f"{_shown(raw)}: a checkbox is on or off")
            elif isinstance(field, forms.ModelMultipleChoiceField):
                for item in (
                    self.data.getlist(name) if hasattr(self.data, "getlist") else []
                ):
                    if "\x00" in item:
                        self.cleaned_data.pop(name, None)
                        self.add_error(name, f"{_shown(item)} is not a channel")
                        break
            elif isinstance(field, forms.CharField) and isinstance(raw, str):
                if "\x00" in raw:
                    self.cleaned_data.pop(name, None)
                    self.add_error(
                        name, f"{_shown(raw)}: NUL characters are not allowed"
                    )


class AlertRuleForm(_Named):
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
    channels = forms.ModelMultipleChoiceField(
        queryset=Channel.objects.all(),
        required=False,
        error_messages={
            "invalid_choice": "%(value)r is not a channel",
            "invalid_pk_value": "%(pk)r is not a channel",
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
                value: float | int = int(raw) if name in self.INTS else float(raw)
            except ValueError:
                self.add_error(name, f"{_shown(raw)} is not a number")
                continue
            if value != value or value in (float("inf"), float("-inf")):
                self.add_error(name, f"{_shown(raw)} is not a finite number")
                continue
            data[name] = value
        if self.errors:
            return data
        if data.get("for_periods") is None:
            data["for_periods"] = 1
        if data.get("repeat_minutes") is None:
            data["repeat_minutes"] = 240
        for name, message in rule_problems(data):
            self.add_error(name if name in self.fields else None, message)
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


class ChannelForm(_Named):
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
        help_text="webhook or Slack incoming webhook",
    )

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
        for name, message in channel_problems(data["kind"], config):
            field_name = "secret_url" if name == "url" else name
            self.add_error(field_name if field_name in self.fields else None, message)
        data["config"] = config
        return data


class SilenceForm(_Named):
    scope = forms.ChoiceField(
        choices=[("rule", "rule"), ("deployment", "deployment"), ("team", "team")],
        error_messages=CHOICE_ERROR,
    )
    name = forms.CharField(max_length=100)
    hours = forms.CharField(max_length=10, initial="4", label="For (hours)")
    comment = forms.CharField(max_length=300, required=False)

    def clean_hours(self) -> int:
        raw = self.cleaned_data["hours"]
        try:
            hours = int(raw.strip())
        except ValueError:
            raise forms.ValidationError(
                f"{_shown(raw)} is not a whole number"
            ) from None
        if not 1 <= hours <= 24 * 90:
            raise forms.ValidationError(f"{hours!r}: between 1 and {24 * 90} hours")
        return hours
