"""Every input of the unit-economics pages goes through one of these forms;
refusals name the field and the value."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django import forms

from analytics.errors import shown
from costapp.economics.figures import scope_names_read
from costapp.filters import BoundedDateField
from costapp.forms import NamedForm

MAX_DAYS = {"day": 3 * 366, "hour": 31, "week": 5 * 366, "month": 10 * 366}
DEFAULT_DAYS = {"day": 90, "hour": 7, "week": 26 * 7, "month": 366}
GRAINS = [("day", "day"), ("hour", "hour"), ("week", "week"), ("month", "month")]
REFRESH_CHOICES = [
    ("", "off"),
    ("60", "every minute"),
    ("300", "every 5 minutes"),
    ("900", "every 15 minutes"),
]
CLOCK_CHOICES = [
    ("", "any clock"),
    ("final", "final bill"),
    ("estimated", "estimated bill"),
    ("provisional", "provisional"),
]
SCOPE_CHOICES = [("fleet", "fleet"), ("team", "team"), ("deployment", "deployment")]
MAX_BUDGET = Decimal("1e12")


def _choice(choices: list[tuple[str, str]], **kwargs: Any) -> forms.ChoiceField:
    # The form's NamedErrors puts ``grain='year': `` before the reason.
    return forms.ChoiceField(
        choices=choices,
        required=False,
        error_messages={
            "invalid_choice": "is not one of "
            + ", ".join(key for key, _ in choices if key)
        },
        **kwargs,
    )


@dataclass(frozen=True)
class Window:
    start: date
    end: date  # exclusive
    grain: str
    clock: str
    scope: str


def default_window(today: date) -> Window:
    """What a page opens with: the 90 UTC days before today (today is not
    over, so it is left out of day figures)."""
    return Window(today - timedelta(days=90), today, "day", "", "fleet")


class EconomicsWindowForm(NamedForm):
    """A window of UTC days (end exclusive), a grain, a clock and a scope.
    Its days are the shared filter's (``BoundedDateField``: one range and
    one wording for a refused date on every page)."""

    start = BoundedDateField(required=False)
    end = BoundedDateField(required=False, label="End (exclusive)")
    grain = _choice(GRAINS)
    clock = _choice(CLOCK_CHOICES)
    scope = _choice(SCOPE_CHOICES)
    # The overview reloads itself, as a wall screen's Grafana does; the
    # figures change at most every refresh (15 min on the default schedule).
    refresh = _choice(REFRESH_CHOICES, label="Auto-refresh")

    def __init__(self, *args: Any, today: date, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.today = today

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        data["grain"] = data.get("grain") or "day"
        data["scope"] = data.get("scope") or "fleet"
        data["clock"] = data.get("clock") or ""
        # Days end before today (not over yet); hours run to now.
        hourly = data["grain"] == "hour"
        data["end"] = data.get("end") or self.today + timedelta(days=int(hourly))
        longest = MAX_DAYS[data["grain"]]
        default = DEFAULT_DAYS[data["grain"]]
        data["start"] = data.get("start") or data["end"] - timedelta(days=default)
        if data["end"] <= data["start"]:
            self.add_error("end", f"must be after start {data['start'].isoformat()}")
        elif (data["end"] - data["start"]).days > longest:
            self.add_error(
                "start",
                f"the window to end {data['end'].isoformat()} is longer than "
                f"{longest} days for grain {data['grain']!r}",
            )
        return data

    def window(self) -> Window:
        """The cleaned window; the defaults for an empty query string."""
        if not self.is_bound:
            return default_window(self.today)
        d = self.cleaned_data
        return Window(d["start"], d["end"], d["grain"], d["clock"], d["scope"])


# The grains a figure page may show a stored series at (hours have their own
# window: the deployment page's window is days).
FIGURE_GRAINS = [("day", "day"), ("week", "week"), ("month", "month")]


class EconomicsGrainForm(NamedForm):
    """The grain of a page whose window is fixed (the deployment page)."""

    grain = _choice(FIGURE_GRAINS)

    def grain_or_default(self) -> str:
        if not self.is_bound or not self.is_valid():
            return "day"
        return self.cleaned_data.get("grain") or "day"


# Refusals quote the value (a long value cut at 80); a NUL byte is the form
# base's (costapp/forms.py).
TEXT_ERRORS = {"max_length": "%(value).80r is longer than %(limit_value)d characters"}


class BudgetForm(NamedForm):
    scope = forms.ChoiceField(
        choices=[("team", "team"), ("deployment", "deployment"), ("fleet", "fleet")],
        error_messages={"invalid_choice": "%(value)r is not one of the choices"},
    )
    name = forms.CharField(
        max_length=100,
        required=False,
        help_text="the team or deployment; empty for the fleet",
        error_messages=TEXT_ERRORS,
    )
    monthly_amount = forms.CharField(
        max_length=40,
        label="Monthly amount",
        widget=forms.NumberInput({"step": "any"}),
        error_messages=TEXT_ERRORS,
    )
    currency = forms.CharField(max_length=3, initial="USD", error_messages=TEXT_ERRORS)

    def clean_monthly_amount(self) -> Decimal:
        raw = self.cleaned_data["monthly_amount"]
        if not raw.isascii():  # Decimal reads full-width digits; people do not
            raise forms.ValidationError(f"{shown(raw)} is not a number")
        try:
            amount = Decimal(raw.strip())
        except (InvalidOperation, AttributeError) as exc:
            raise forms.ValidationError(f"{shown(raw)} is not a number") from exc
        if not amount.is_finite() or amount <= 0 or amount >= MAX_BUDGET:
            raise forms.ValidationError(
                f"{shown(raw)} must be a positive amount below {MAX_BUDGET:,.0f}"
            )
        if amount != amount.quantize(Decimal("0.01")):
            raise forms.ValidationError(f"{shown(raw)}: at most 2 decimal places")
        return amount

    def clean_currency(self) -> str:
        raw = self.cleaned_data["currency"]
        code = raw.strip().upper()
        if not (len(code) == 3 and code.isascii() and code.isalpha()):
            raise forms.ValidationError(f"{shown(raw)} is not a currency code")
        return code

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        scope = data.get("scope")
        if not scope or self.errors:
            return data
        name = (data.get("name") or "").strip()
        if scope == "fleet":
            data["name"] = "fleet"
            return data
        known = scope_names_read()[scope]
        if name not in known:
            self.add_error(
                "name",
                f"{shown(name)} is not a {scope} (known: {', '.join(known) or 'none'})",
            )
        data["name"] = name
        return data
