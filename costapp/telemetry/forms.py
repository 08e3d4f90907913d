"""Telemetry inputs: the backfill form and the deployment page's window.

Every refusal names the field and the value (cut to 80 characters), as
``analytics.errors.InvalidInput`` and the fleet file do.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.utils import timezone

from analytics.errors import InvalidInput, shown
from costapp.days import iso_day, utc_midnight
from costapp.forms import NamedForm
from costapp.models import Deployment
from costapp.sources.promql import selector_reason
from costapp.telemetry.services import EARLIEST, MAX_STEPS
from costapp.validation import date_in

# The deployment page aggregates on the server (charts at most 2,000 points
# per trace, its table at most 100 rows), so a window is bounded only as the
# bills pages bound theirs: three years of hours is 26,000 rows to read.
PAGE_MAX_DAYS = 3 * 366


def day_parse(field: str, raw: Any) -> date:
    """A UTC day ``YYYY-MM-DD`` within the days telemetry can hold; one that
    is no date is refused as on every page (``validation.date_in``)."""
    try:  # the range is telemetry's own (below), narrower than the product's
        day = date_in(str(raw).strip(), field=field, earliest=date.min, latest=date.max)
    except InvalidInput as exc:
        raise forms.ValidationError(str(exc)) from None
    latest = timezone.now().date() + timedelta(days=1)
    if not EARLIEST.date() <= day <= latest:
        raise forms.ValidationError(
            f"{field}={shown(raw)}: outside {EARLIEST:%Y-%m-%d} .. {latest}, the "
            "days telemetry can hold"
        )
    return day


class BackfillForm(NamedForm):
    deployments = forms.ModelMultipleChoiceField(
        queryset=Deployment.objects.exclude(prometheus_selector="").order_by("name"),
        to_field_name="name",
        help_text="Deployments with a Prometheus selector.",
    )
    start = forms.CharField(
        max_length=10,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="UTC day, inclusive",
    )
    end = forms.CharField(
        max_length=10,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="UTC day, exclusive",
    )
    dcgm_selector = forms.CharField(
        required=False,
        max_length=500,
        help_text=(
            "DCGM label matchers for these deployments' GPUs for this run only, "
            'e.g. Hostname="node-a"; empty: each deployment\'s own DCGM selector'
        ),
    )
    scrape_interval_s = forms.FloatField(required=False, min_value=1, max_value=3600)
    confirm = forms.BooleanField(
        required=False,
        label="Confirm a long backfill",
        help_text=f"needed above {MAX_STEPS:,} steps (one per deployment and day)",
    )

    def clean_start(self) -> date:
        return day_parse("start", self.cleaned_data["start"])

    def clean_end(self) -> date:
        return day_parse("end", self.cleaned_data["end"])

    def clean_dcgm_selector(self) -> str:
        value: str = self.cleaned_data.get("dcgm_selector") or ""
        reason = selector_reason(value)
        if reason is not None:
            raise forms.ValidationError(f"dcgm_selector={shown(value)}: {reason}")
        return value.strip()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not settings.PROMETHEUS_URL:
            # Said before anything is stored or queued (the demo has none).
            raise forms.ValidationError(PROMETHEUS_MISSING)
        start, end = data.get("start"), data.get("end")
        if start and end and end <= start:
            self.add_error("end", f"end={shown(end)}: not after start {start}")
        return data

    def window(self) -> tuple[datetime, datetime]:
        d = self.cleaned_data
        return utc_midnight(d["start"]), utc_midnight(d["end"])


PROMETHEUS_MISSING = (
    "PROMETHEUS_URL is not set: backfills read Prometheus (or Thanos Query, Mimir, "
    "VictoriaMetrics); set it in the environment (docs/telemetry.md)."
)


class WindowForm(NamedForm):
    """The deployment page's ``?start=&end=`` (UTC days); both optional."""

    start = forms.CharField(required=False, max_length=200)
    end = forms.CharField(required=False, max_length=200)

    def clean_start(self) -> date | None:
        raw = self.cleaned_data.get("start")
        return day_parse("start", raw) if raw else None

    def clean_end(self) -> date | None:
        raw = self.cleaned_data.get("end")
        return day_parse("end", raw) if raw else None

    def window(
        self, default: tuple[datetime, datetime]
    ) -> tuple[datetime, datetime, list[str]]:
        """(start, end, notes): the window asked for, the default for what was
        not given or refused, at most ``PAGE_MAX_DAYS`` ending at ``end``."""
        notes: list[str] = []
        self.is_valid()  # cleaned_data keeps the fields that passed
        data = self.cleaned_data
        for errors in self.errors.values():
            notes.extend(str(e) for e in errors)
        start = utc_midnight(data["start"]) if data.get("start") else None
        end = utc_midnight(data["end"]) if data.get("end") else None
        if start is None and end is None:
            start, end = default
        elif end is None:
            end = start + (default[1] - default[0]) if start else default[1]
        elif start is None:
            start = end - (default[1] - default[0])
        assert start is not None and end is not None
        if end <= start:
            notes.append(
                f"end={shown(iso_day(end))}: not after start {start:%Y-%m-%d}; "
                "showing the last hours with data"
            )
            start, end = default
        if end - start > timedelta(days=PAGE_MAX_DAYS):
            asked = f"{start:%Y-%m-%d} .. {end:%Y-%m-%d}"
            start = end - timedelta(days=PAGE_MAX_DAYS)
            notes.append(
                f"A window is at most {PAGE_MAX_DAYS} days: showing "
                f"{start:%Y-%m-%d} .. {end:%Y-%m-%d} of {asked}."
            )
        return start, end, notes
