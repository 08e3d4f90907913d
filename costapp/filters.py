"""The one filter every data page shares: a window of UTC days (a preset or
custom days), a team and deployments, all in the URL so a link shows the same
page. Built on django-filter: ``FleetFilter`` is a FilterSet over the fleet
(its ``qs`` is the deployments in scope), its form also carries the window.

A view makes one call and its template one include::

    filters = filters_read(request.GET)            # or page_form=, default=
    deployment_days_read(start=filters.start, end=filters.end,
                         **filters.scope)          # team=..., deployments=...
    {% include "_filters.html" with f=filters %}

A refused value is named with its field (``team='x': ...``); the page then
shows its default window and the whole fleet, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import django_filters
from django import forms
from django.utils import timezone

from analytics.errors import InvalidInput
from costapp.days import hour_start
from costapp.forms import NamedForm
from costapp.models import Deployment
from costapp.validation import date_in

MAX_DAYS = 3 * 366
MAX_PICKED = 200  # deployments named in one URL

PRESETS = {
    "7d": "last 7 days",
    "30d": "last 30 days",
    "90d": "last 90 days",
    "mtd": "month to date",
    "last_month": "last month",
    "custom": "custom",
}
DEFAULT_PRESET = "30d"
# Relative windows of whole UTC hours, for the pages whose rows are hours
# (the telemetry page). They follow the day presets' rule: a window ends at
# the last complete period, here the last complete hour; the hour in progress
# is shown only on request, and then labelled partial.
HOUR_PRESETS = {
    "6h": "last 6 hours",
    "24h": "last 24 hours",
    "48h": "last 48 hours",
}
WINDOW_FIELDS = ("preset", "start", "end")
SCOPE_FIELDS = ("team", "deployment")
FILTER_FIELDS = WINDOW_FIELDS + SCOPE_FIELDS


def preset_window(
    preset: str, today: date, *, through_today: bool = False
) -> tuple[date, date]:
    """UTC days [start, end) of a preset. Each ends at the last complete UTC
    day (today is not over: a preset never holds it, so a comparison never
    sets a part-day against whole ones); month to date is the month of that
    day (on the 1st, the whole of last month). ``through_today``: a live
    page's (the alerts log's), whose rolling presets run to now, labelled
    partial (``window_label``)."""
    if preset == "last_month":
        first = today.replace(day=1)
        return (first - timedelta(days=1)).replace(day=1), first
    end = today + timedelta(days=1) if through_today else today
    if preset == "mtd":
        return (end - timedelta(days=1)).replace(day=1), end
    days = {"7d": 7, "30d": 30, "90d": 90}[preset]
    return end - timedelta(days=days), end


def preset_of(start: date, end: date, today: date) -> str:
    """The rolling preset whose days these are; "custom" if none."""
    for key in ("7d", "30d", "90d"):
        if preset_window(key, today) == (start, end):
            return key
    return "custom"


def window_label(label: str, end: date, today: date) -> str:
    """A window's label; one reaching into today says so: today is partial."""
    if end > today:
        return f"{label}; {today.isoformat()} is today: partial, not closed"
    return label


def hour_window(
    preset: str, now: datetime, *, through_now: bool = False
) -> tuple[datetime, datetime]:
    """UTC hours [start, end) of an hour preset, ending at the last complete
    hour; ``through_now``: at the end of the hour in progress (the same count
    of hours, the last one partial, as ``preset_window`` does with today)."""
    if preset not in HOUR_PRESETS:
        raise ValueError(f"preset={preset!r}: not an hour preset")
    end = hour_start(now) + timedelta(hours=1 if through_now else 0)
    return end - timedelta(hours=int(preset.removesuffix("h"))), end


def hour_window_label(label: str, end: datetime, now: datetime) -> str:
    """An hour window's label; one reaching into the hour in progress says
    so, as ``window_label`` says it of today."""
    if end > now:
        current = hour_start(now)
        return (
            f"{label}; the hour from {current:%Y-%m-%d %H:%M} UTC is in progress: "
            "partial, not closed"
        )
    return label


class BoundedDateField(forms.DateField):
    """An ISO date within costapp's supported range (2000-01-01..2100-12-31),
    so ``0001-01-01`` or ``2026-13-45`` is a message, never an overflow
    further down; the form (``NamedErrors``) names the field and the value."""

    widget = forms.DateInput({"type": "date"})

    def to_python(self, value: Any) -> date | None:
        if value in self.empty_values:
            return None
        try:
            return date_in(value.strip() if isinstance(value, str) else value, field="")
        except InvalidInput as exc:
            raise forms.ValidationError(exc.reason, code="invalid") from None


class WindowForm(NamedForm):
    """A date range by preset or custom days. ``start``/``end`` without a
    preset mean custom; a preset other than custom wins over the dates (the
    form sends both). ``today`` and ``max_days`` may be set per page."""

    preset = forms.ChoiceField(
        choices=list(PRESETS.items()),
        required=False,
        label="Range",
        error_messages={
            "invalid_choice": f"not a preset (one of {', '.join(PRESETS)})"
        },
    )
    start = BoundedDateField(required=False, label="Start (UTC)")
    end = BoundedDateField(required=False, label="End (exclusive)")

    today: date | None = None
    through_today: bool = False
    max_days: int = MAX_DAYS
    default_preset: str = DEFAULT_PRESET
    # A page's own default window (start, end, label) for a query that names
    # no days: the overview's 90 days before today.
    default_window: tuple[date, date, str] | None = None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        has_dates = bool(data.get("start") or data.get("end"))
        if not (data.get("preset") or has_dates) and self.default_window:
            data["start"], data["end"], data["label"] = self.default_window
            # A page's default that is a preset's days is that preset.
            today = self.today or timezone.now().date()
            data["preset"] = preset_of(data["start"], data["end"], today)
            if data["preset"] != "custom":
                data["label"] = PRESETS[data["preset"]]
            return data
        preset = data.get("preset") or ("custom" if has_dates else self.default_preset)
        data["preset"] = preset
        if preset != "custom":
            today = self.today or timezone.now().date()
            data["start"], data["end"] = preset_window(
                preset, today, through_today=self.through_today
            )
        for name in ("start", "end"):
            if not data.get(name):
                raise forms.ValidationError(
                    f"{name}='': a custom range needs a start and an end"
                )
        if data["end"] <= data["start"]:
            raise forms.ValidationError(
                f"end={data['end'].isoformat()!r}: must be after start {data['start']}"
            )
        if (data["end"] - data["start"]).days > self.max_days:
            raise forms.ValidationError(
                f"end={data['end'].isoformat()!r}: the window from "
                f"{data['start']} is longer than {self.max_days} days"
            )
        return data


def _teams() -> list[tuple[str, str]]:
    teams = Deployment.objects.exclude(team="").order_by("team")
    names = list(dict.fromkeys(teams.values_list("team", flat=True)))
    return [("", "all teams"), *((t, t) for t in names)]


def _deployments() -> list[tuple[str, str]]:
    names = Deployment.objects.order_by("name").values_list("name", flat=True)
    return [(n, n) for n in names]


class FleetFilter(django_filters.FilterSet):
    """Team and deployments over the fleet; the form (``Meta.form``) adds the
    window. Choices come from the fleet on every request."""

    team = django_filters.ChoiceFilter(
        field_name="team",
        choices=_teams,
        empty_label=None,
        error_messages={"invalid_choice": "not a team of the fleet"},
    )
    deployment = django_filters.MultipleChoiceFilter(
        field_name="name",
        choices=_deployments,
        widget=forms.CheckboxSelectMultiple,
        error_messages={"invalid_choice": "%(value)r is not a deployment of the fleet"},
    )

    class Meta:
        model = Deployment
        fields: list[str] = []
        form = WindowForm

    def __init__(
        self,
        data: Mapping[str, Any] | None = None,
        *,
        today: date | None = None,
        max_days: int = MAX_DAYS,
        default_preset: str = DEFAULT_PRESET,
        default: tuple[date, date, str] | None = None,
        through_today: bool = False,
    ) -> None:
        super().__init__(data, queryset=Deployment.objects.order_by("name"))
        self.today, self.max_days, self.default_preset = today, max_days, default_preset
        self.default, self.through_today = default, through_today

    def filter_queryset(self, queryset: Any) -> Any:
        # The form also holds the window (and a page's own fields): only the
        # declared filters narrow the fleet.
        for name, value in self.form.cleaned_data.items():
            if name in self.filters:
                queryset = self.filters[name].filter(queryset, value)
        return queryset

    @property
    def form(self) -> forms.Form:
        if not hasattr(self, "_form"):
            made = super().form
            made.today, made.max_days = self.today, self.max_days  # type: ignore[attr-defined]
            made.default_preset = self.default_preset  # type: ignore[attr-defined]
            made.default_window = self.default  # type: ignore[attr-defined]
            made.through_today = self.through_today  # type: ignore[attr-defined]
            if len(self.data.getlist("deployment") if self.data else ()) > MAX_PICKED:
                made.add_error(None, f"deployment: more than {MAX_PICKED} named")
        return self._form


@dataclass(frozen=True)
class PresetLink:
    key: str
    label: str
    url: str
    current: bool


@dataclass(frozen=True)
class Filters:
    """What a page shows: the window, the scope, and how to say it."""

    start: date
    end: date  # exclusive
    preset: str
    preset_label: str
    team: str
    picked: tuple[str, ...]  # deployments named in the URL
    deployments: tuple[str, ...] | None  # in scope; None: the whole fleet
    form: forms.Form
    errors: list[str]
    page: dict[str, Any] = field(default_factory=dict)  # the page form's cleaned data
    page_fields: list[Any] = field(default_factory=list)  # its bound fields to show
    links: list[PresetLink] = field(default_factory=list)

    @property
    def last_day(self) -> date:
        return self.end - timedelta(days=1)

    @property
    def days(self) -> int:
        return (self.end - self.start).days

    @property
    def scoped(self) -> bool:
        return self.deployments is not None

    @property
    def scope(self) -> dict[str, Any]:
        """Keyword arguments of every selector that filters the fleet."""
        return {"team": self.team, "deployments": self.deployments}

    @property
    def scope_text(self) -> str:
        parts = []
        if self.team:
            parts.append(f"team {self.team}")
        if self.picked:
            noun = "deployment" if len(self.picked) == 1 else "deployments"
            parts.append(f"{noun} " + ", ".join(self.picked))
        if not parts:
            return "the whole fleet"
        text = "; ".join(parts)
        if self.deployments == ():
            text += " (no deployment matches)"
        return text

    @property
    def picked_text(self) -> str:
        if not self.picked:
            return "all"
        if len(self.picked) <= 3:
            return ", ".join(self.picked)
        return f"{len(self.picked)} chosen"

    def params(self, *, window: bool = True) -> list[tuple[str, str]]:
        """The filter as query parameters (the window as its days)."""
        out: list[tuple[str, str]] = []
        if window:
            out += [
                ("preset", "custom"),
                ("start", self.start.isoformat()),
                ("end", self.end.isoformat()),
            ]
        if self.team:
            out.append(("team", self.team))
        out += [("deployment", name) for name in self.picked]
        return out

    @property
    def query(self) -> str:
        """For links to other pages: the same days and scope."""
        return urlencode(self.params())


def _links(data: Mapping[str, Any], current: str, path: str = "") -> list[PresetLink]:
    keep: list[tuple[str, str]] = []
    getlist = getattr(data, "lists", None)
    items = getlist() if getlist is not None else ((k, [v]) for k, v in data.items())
    for key, values in items:
        if key in WINDOW_FIELDS:
            continue
        keep += [(key, v) for v in values]
    return [
        PresetLink(
            key, label, f"{path}?{urlencode([('preset', key), *keep])}", key == current
        )
        for key, label in PRESETS.items()
        if key != "custom"
    ]


def filters_read(
    data: Mapping[str, Any],
    *,
    today: date | None = None,
    form: type[WindowForm] | None = None,
    page_form: forms.Form | None = None,
    page_fields: Sequence[str] = (),
    default: tuple[date, date, str] | None = None,
    default_preset: str = DEFAULT_PRESET,
    max_days: int = MAX_DAYS,
    refused: Sequence[str] = (),
    through_today: bool = False,
) -> Filters:
    """The page's filters from its query string.

    ``form``: a subclass of ``WindowForm`` adding the page's own fields (the
    costs pages' cost basis); their cleaned values land in ``page``.
    ``page_form``/``page_fields``: a separate, already-validated form whose
    fields are drawn inside the filter form (the economics grain and clock).
    ``default``: (start, end, label) shown for an empty query instead of the
    default preset.
    ``refused``: the page form's own refusals (named): the page then shows
    the default window for the whole fleet, and says so, as for its own.
    ``through_today``: presets run to now (a live page: the alerts log),
    labelled partial; elsewhere they end at the last complete UTC day.
    """
    today = today or timezone.now().date()
    filterset_class: type[FleetFilter] = FleetFilter
    if form is not None:
        meta = type("Meta", (FleetFilter.Meta,), {"form": form})
        filterset_class = type("PageFilter", (FleetFilter,), {"Meta": meta})
    bound = {k: v for k, v in data.items() if k in FILTER_FIELDS or form is not None}
    fs = filterset_class(
        data if bound else None,
        today=today,
        max_days=max_days,
        default_preset=default_preset,
        default=default,
        through_today=through_today,
    )
    shown_page = [page_form[name] for name in page_fields] if page_form else []
    page_data = dict(page_form.cleaned_data) if page_form and page_form.is_bound else {}
    if fs.is_bound and fs.form.is_valid() and not refused:
        d = fs.form.cleaned_data
        picked = tuple(d.get("deployment") or ())
        team = d.get("team") or ""
        scoped = tuple(fs.qs.values_list("name", flat=True)) if team or picked else None
        own = {k: v for k, v in d.items() if k not in (*FILTER_FIELDS, "label")}
        # The form shows the days a preset stands for (cleaning is done).
        shown = data.copy() if hasattr(data, "copy") else dict(data)
        shown["start"], shown["end"] = d["start"].isoformat(), d["end"].isoformat()
        shown["preset"] = d["preset"]
        fs.form.data = shown
        return Filters(
            start=d["start"],
            end=d["end"],
            preset=d["preset"],
            preset_label=window_label(
                d.get("label") or PRESETS[d["preset"]], d["end"], today
            ),
            team=team,
            picked=picked,
            deployments=scoped,
            form=fs.form,
            errors=[],
            page={**page_data, **own},
            page_fields=shown_page,
            links=_links(data, d["preset"]),
        )
    errors = list(refused)
    if fs.is_bound:
        errors += [str(e) for errors_ in fs.form.errors.values() for e in errors_]
    if default is not None:
        start, end, label = default
        preset = preset_of(start, end, today)
        label = PRESETS[preset] if preset != "custom" else label
    else:
        preset = default_preset
        start, end = preset_window(preset, today, through_today=through_today)
        label = PRESETS[preset]
    if errors:
        errors.append(
            f"showing the default window {start} to {end} (exclusive; {label}) "
            "for the whole fleet instead"
        )
    unbound = filterset_class(today=today, max_days=max_days).form
    unbound.initial = {"preset": preset, "start": start, "end": end}
    own_defaults: dict[str, Any] = {}
    if form is not None:
        probe = form({})
        probe.is_valid()
        own_defaults = {
            k: v for k, v in probe.cleaned_data.items() if k not in FILTER_FIELDS
        }
        unbound.initial.update(own_defaults)
    return Filters(
        start=start,
        end=end,
        preset=preset,
        preset_label=window_label(label, end, today),
        team="",
        picked=(),
        deployments=None,
        form=unbound,
        errors=errors,
        page={**page_data, **own_defaults},
        page_fields=shown_page,
        links=_links({k: v for k, v in data.items() if k not in FILTER_FIELDS}, preset),
    )
