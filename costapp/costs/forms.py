"""Forms of the bills pages; every error names the field and the value sent."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django import forms
from django.utils import timezone

from costapp.costs.selectors import BASES, DEFAULT_BASIS
from costapp.costs.services import BillsError, focus_name_check, focus_uri_check
from costapp.forms import NamedErrors
from costapp.validation import InvalidInput, account_id_in, date_in, shown, text_in

MAX_DAYS = 3 * 366


class BoundedDateField(forms.DateField):
    """An ISO date within costapp's supported range (2000-01-01..2100-12-31);
    the error names the field and the value, so ``0001-01-01`` or
    ``2026-13-45`` is a message, never an overflow further down."""

    widget = forms.DateInput({"type": "date"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.name = ""

    def to_python(self, value: Any) -> date | None:
        if value in self.empty_values:
            return None
        try:
            return date_in(
                value.strip() if isinstance(value, str) else value,
                field=self.name or "date",
            )
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None


class _Named(NamedErrors, forms.Form):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            if isinstance(field, BoundedDateField):
                field.name = name


def default_window() -> dict[str, Any]:
    form = RangeForm({})
    form.is_valid()
    return form.cleaned_data


class BackfillForm(_Named):
    accounts = forms.CharField(
        help_text="12-digit linked account ids, comma separated",
        max_length=2000,
    )
    start = BoundedDateField()
    end = BoundedDateField(label="End (exclusive)")
    granularity = forms.ChoiceField(
        choices=[("DAILY", "daily"), ("HOURLY", "hourly (trailing 14 days)")]
    )
    tag_key = forms.CharField(
        required=False,
        max_length=128,
        help_text="cost allocation tag to group by (one query per record type)",
    )
    confirm = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def clean_accounts(self) -> list[str]:
        raw = self.cleaned_data["accounts"]
        accounts = [a.strip() for a in raw.replace("\n", ",").split(",") if a.strip()]
        if not accounts:
            raise forms.ValidationError("at least one account id")
        try:
            accounts = [account_id_in(a, field="accounts") for a in accounts]
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc)) from None
        return list(dict.fromkeys(accounts))

    def clean_tag_key(self) -> str:
        value = self.cleaned_data.get("tag_key") or ""
        if "\x00" in value:
            raise forms.ValidationError(f"tag_key={shown(value)}: contains a NUL byte")
        return value.strip()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("start") and data.get("end") and data["end"] <= data["start"]:
            raise forms.ValidationError(
                f"end={data['end'].isoformat()!r}: must be after start {data['start']}"
            )
        return data


class FocusImportForm(_Named):
    file = forms.FileField(
        required=False,
        help_text="a FOCUS CSV or Parquet export (.csv, .csv.gz, .parquet)",
    )
    uri = forms.CharField(
        required=False,
        max_length=1000,
        label="or an S3 URI",
        help_text="s3://bucket/prefix/2025-01.parquet, under a prefix the admin "
        "allows (COSTAPP_FOCUS_S3_PREFIXES)",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        if bool(data.get("file")) == bool(data.get("uri")):
            raise forms.ValidationError("give either a file or an S3 URI")
        try:
            if data.get("file"):
                focus_name_check(data["file"].name)
            else:
                data["uri"] = focus_uri_check(data["uri"])
        except BillsError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


PRESETS = {
    "7d": "last 7 days",
    "30d": "last 30 days",
    "90d": "last 90 days",
    "mtd": "month to date",
    "last_month": "last month",
    "custom": "custom",
}
DEFAULT_PRESET = "30d"


def preset_window(preset: str, today: date) -> tuple[date, date]:
    """UTC days [start, end) of a preset; the rolling ones include today."""
    tomorrow = today + timedelta(days=1)
    if preset == "mtd":
        return today.replace(day=1), tomorrow
    if preset == "last_month":
        first = today.replace(day=1)
        return (first - timedelta(days=1)).replace(day=1), first
    days = {"7d": 7, "30d": 30, "90d": 90}[preset]
    return tomorrow - timedelta(days=days), tomorrow


class RangeForm(_Named):
    """A date range by preset or custom days, and a cost basis; lives in the
    URL so a link shows the same window. ``start``/``end`` without a preset
    mean custom."""

    preset = forms.ChoiceField(choices=list(PRESETS.items()), required=False)
    start = BoundedDateField(required=False)
    end = BoundedDateField(required=False, label="End (exclusive)")
    basis = forms.ChoiceField(choices=list(BASES.items()), required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        preset = data.get("preset") or (
            "custom" if data.get("start") or data.get("end") else DEFAULT_PRESET
        )
        data["preset"] = preset
        data["basis"] = data.get("basis") or DEFAULT_BASIS
        if preset != "custom":
            data["start"], data["end"] = preset_window(preset, timezone.now().date())
            return data
        for name in ("start", "end"):
            if not data.get(name):
                raise forms.ValidationError(
                    f"{name}='': a custom range needs a start and an end"
                )
        if data["end"] <= data["start"]:
            raise forms.ValidationError(
                f"end={data['end'].isoformat()!r}: must be after start {data['start']}"
            )
        if (data["end"] - data["start"]).days > MAX_DAYS:
            raise forms.ValidationError(
                f"end={data['end'].isoformat()!r}: the window from "
                f"{data['start']} is longer than {MAX_DAYS} days"
            )
        return data


class ExportForm(RangeForm):
    """A finance export: a window (or one calendar ``month``), grain, grouping
    and format. A month always means all of its days."""

    month = forms.RegexField(
        regex=r"^\d{4}-(0[1-9]|1[0-2])$",
        required=False,
        max_length=7,
        help_text="YYYY-MM: the whole calendar month (UTC)",
        error_messages={"invalid": "expected YYYY-MM"},
    )
    grain = forms.ChoiceField(
        choices=[("day", "day"), ("month", "month")], required=False
    )
    by = forms.ChoiceField(
        choices=[("deployment", "deployment"), ("team", "team")], required=False
    )
    format = forms.ChoiceField(
        choices=[("csv", "CSV"), ("parquet", "Parquet")], required=False
    )

    def clean(self) -> dict[str, Any]:
        month = self.cleaned_data.get("month") if "month" not in self.errors else ""
        data = super().clean() or {}
        if self.errors:
            return data
        if month:
            try:
                first = date_in(f"{month}-01", field="month")
            except InvalidInput as exc:
                raise forms.ValidationError(str(exc)) from None
            data["preset"] = "custom"
            data["start"] = first
            data["end"] = (first + timedelta(days=32)).replace(day=1)
        data["grain"] = data.get("grain") or "day"
        data["by"] = data.get("by") or "deployment"
        data["format"] = data.get("format") or "csv"
        return data


class BillLinesForm(_Named):
    """One UTC day's bill lines (the drill-down from a bill day)."""

    day = BoundedDateField()
    basis = forms.ChoiceField(choices=list(BASES.items()), required=False)
    account = forms.CharField(required=False, max_length=32)

    def clean_account(self) -> str:
        value = self.cleaned_data.get("account") or ""
        if not value:
            return ""
        try:
            return text_in(value, field="account", max_length=32).strip()
        except InvalidInput as exc:
            raise forms.ValidationError(str(exc)) from None
