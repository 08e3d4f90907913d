"""Forms of the bills pages; every error names the field and the value sent."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms

from analytics.errors import InvalidInput, shown
from costapp.costs.selectors import BASES, DEFAULT_BASIS
from costapp.costs.services import BillsError, focus_name_check, focus_uri_check
from costapp.filters import (
    DEFAULT_PRESET,
    MAX_DAYS,
    PRESETS,
    BoundedDateField,
    WindowForm,
    preset_window,
)
from costapp.forms import NamedForm
from costapp.validation import account_id_in, date_in, text_in

__all__ = [
    "DEFAULT_PRESET",
    "MAX_DAYS",
    "PRESETS",
    "BackfillForm",
    "BillLinesForm",
    "BoundedDateField",
    "ExportForm",
    "FocusImportForm",
    "RangeForm",
    "default_window",
    "preset_window",
]


def default_window() -> dict[str, Any]:
    form = RangeForm({})
    form.is_valid()
    return form.cleaned_data


class BackfillForm(NamedForm):
    free_text_fields = ("accounts",)  # pasted one a line, or comma separated

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
            # Named with the whole value (NamedErrors); the one refused, if
            # there are several, quoted.
            part = f"{shown(exc.value)} " if len(accounts) > 1 else ""
            raise forms.ValidationError(part + exc.reason) from None
        return list(dict.fromkeys(accounts))

    def clean_tag_key(self) -> str:
        return (self.cleaned_data.get("tag_key") or "").strip()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("start") and data.get("end") and data["end"] <= data["start"]:
            raise forms.ValidationError(
                f"end={data['end'].isoformat()!r}: must be after start {data['start']}"
            )
        return data


class FocusImportForm(NamedForm):
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


class RangeForm(WindowForm):
    """A date range by preset or custom days (``costapp.filters.WindowForm``)
    and a cost basis; lives in the URL so a link shows the same window."""

    basis = forms.ChoiceField(
        choices=list(BASES.items()), required=False, label="Cost basis"
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.errors:
            data["basis"] = data.get("basis") or DEFAULT_BASIS
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


class BillLinesForm(NamedForm):
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
