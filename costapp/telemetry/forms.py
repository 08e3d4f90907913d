"""Telemetry inputs: the backfill form and the deployment page's window.

Every refusal names the field and the value (cut to 80 characters), as
``analytics.errors.InvalidInput`` and the fleet file do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.utils import timezone

from analytics.errors import InvalidInput, shown
from costapp.days import iso_day, utc_midnight
from costapp.filters import (
    HOUR_PRESETS,
    hour_window,
    hour_window_label,
    preset_window,
    window_label,
)
from costapp.filters import PRESETS as DAY_PRESETS
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


# The page's ranges: relative hours (the rows are hours), the day presets of
# every data page, custom UTC days; none: the last two UTC days with data.
PRESETS = {**HOUR_PRESETS, "7d": DAY_PRESETS["7d"], "30d": DAY_PRESETS["30d"]}
LATEST = "the last 2 UTC days with data"


@dataclass(frozen=True)
class Window:
    """The window the page shows and how it says so."""

    start: datetime
    end: datetime  # exclusive
    preset: str  # a key of PRESETS, "custom", or "" (the latest data)
    label: str
    in_progress: bool  # it holds the hour (or day) not over yet
    notes: list[str] = field(default_factory=list)

    @property
    def hourly(self) -> bool:
        """Whether it starts or ends inside a UTC day (said in hours)."""
        return self.preset in HOUR_PRESETS or bool(self.start.hour or self.end.hour)


class WindowForm(NamedForm):
    """The deployment page's ``?preset=`` or ``?start=&end=`` (UTC days),
    and ``partial``: a preset then runs through the hour (or day) in
    progress. A preset wins over the days (the form sends both, as the
    filter bar of the other pages does)."""

    preset = forms.ChoiceField(
        choices=[("", LATEST), *PRESETS.items(), ("custom", "custom days")],
        required=False,
        error_messages={
            "invalid_choice": f"not a preset (one of {', '.join(PRESETS)}, custom)"
        },
    )
    start = forms.CharField(required=False, max_length=200)
    end = forms.CharField(required=False, max_length=200)
    partial = forms.BooleanField(required=False)

    def clean_start(self) -> date | None:
        raw = self.cleaned_data.get("start")
        return day_parse("start", raw) if raw else None

    def clean_end(self) -> date | None:
        raw = self.cleaned_data.get("end")
        return day_parse("end", raw) if raw else None

    def window(
        self, default: tuple[datetime, datetime], *, now: datetime | None = None
    ) -> Window:
        """The window asked for; the default for what was not given or was
        refused (each refusal a note), at most ``PAGE_MAX_DAYS``."""
        now = now or timezone.now()
        self.is_valid()  # cleaned_data keeps the fields that passed
        data = self.cleaned_data
        notes = [str(e) for errors in self.errors.values() for e in errors]
        preset = data.get("preset") or ""
        partial = bool(data.get("partial"))
        today = now.astimezone(UTC).date()
        if preset in HOUR_PRESETS:
            start, end = hour_window(preset, now, through_now=partial)
            label = hour_window_label(HOUR_PRESETS[preset], end, now)
            return Window(start, end, preset, label, end > now, notes)
        if preset in PRESETS:
            first, last = preset_window(preset, today, through_today=partial)
            start, end = utc_midnight(first), utc_midnight(last)
            label = window_label(PRESETS[preset], last, today)
            return Window(start, end, preset, label, end > now, notes)
        start, end, label = self._days(data, default, notes)
        chosen = "custom" if label == "custom" else ""
        return Window(
            start, end, chosen, window_label(label, end.date(), today), end > now, notes
        )

    def _days(
        self, data: dict[str, Any], default: tuple[datetime, datetime], notes: list[str]
    ) -> tuple[datetime, datetime, str]:
        """(start, end, label) of the days asked for, the default for what
        was not given or refused, at most ``PAGE_MAX_DAYS`` ending at ``end``."""
        start = utc_midnight(data["start"]) if data.get("start") else None
        end = utc_midnight(data["end"]) if data.get("end") else None
        label = "custom"
        if start is None and end is None:
            (start, end), label = default, LATEST
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
            (start, end), label = default, LATEST
        if end - start > timedelta(days=PAGE_MAX_DAYS):
            asked = f"{start:%Y-%m-%d} .. {end:%Y-%m-%d}"
            start = end - timedelta(days=PAGE_MAX_DAYS)
            notes.append(
                f"A window is at most {PAGE_MAX_DAYS} days: showing "
                f"{start:%Y-%m-%d} .. {end:%Y-%m-%d} of {asked}."
            )
        return start, end, label
