from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.utils import timezone

from costapp.costs.selectors import BASES, DEFAULT_BASIS

MAX_DAYS = 3 * 366


class WindowForm(forms.Form):
    """A UTC day window (end exclusive, like Cost Explorer) and a cost basis."""

    start = forms.DateField(required=False, widget=forms.DateInput({"type": "date"}))
    end = forms.DateField(
        required=False,
        label="End (exclusive)",
        widget=forms.DateInput({"type": "date"}),
    )
    basis = forms.ChoiceField(choices=list(BASES.items()), required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        today = timezone.now().date()
        data["end"] = data.get("end") or today + timedelta(days=1)
        data["start"] = data.get("start") or data["end"] - timedelta(days=31)
        data["basis"] = data.get("basis") or DEFAULT_BASIS
        if data["end"] <= data["start"]:
            raise forms.ValidationError(
                f"end {data['end']} must be after start {data['start']}"
            )
        if (data["end"] - data["start"]).days > MAX_DAYS:
            raise forms.ValidationError(f"window longer than {MAX_DAYS} days")
        return data


class BackfillForm(forms.Form):
    accounts = forms.CharField(
        help_text="12-digit linked account ids, comma separated",
        max_length=2000,
    )
    start = forms.DateField(widget=forms.DateInput({"type": "date"}))
    end = forms.DateField(
        label="End (exclusive)", widget=forms.DateInput({"type": "date"})
    )
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
        bad = [a for a in accounts if not (a.isdigit() and len(a) == 12)]
        if bad:
            raise forms.ValidationError(
                f"not 12-digit AWS account ids: {', '.join(bad)}"
            )
        if not accounts:
            raise forms.ValidationError("at least one account id")
        return list(dict.fromkeys(accounts))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("start") and data.get("end") and data["end"] <= data["start"]:
            raise forms.ValidationError(
                f"end {data['end']} must be after start {data['start']}"
            )
        return data


class FocusImportForm(forms.Form):
    file = forms.FileField(required=False, help_text="a FOCUS CSV or Parquet export")
    uri = forms.CharField(
        required=False,
        max_length=1000,
        label="or a path / S3 URI",
        help_text="/data/focus/2025-01.parquet or s3://bucket/key.csv.gz",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if bool(data.get("file")) == bool(data.get("uri")):
            raise forms.ValidationError("give either a file or a path/S3 URI")
        name = data["file"].name if data.get("file") else data["uri"]
        if not name.lower().endswith(
            (".csv", ".csv.gz", ".parquet", ".parq", ".csv.zip", ".csv.bz2")
        ):
            raise forms.ValidationError(
                f"{name!r}: expected a .csv, .csv.gz or .parquet file"
            )
        return data
