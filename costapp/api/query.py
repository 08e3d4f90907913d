"""Query parameters: declared once as DRF serializers (drf-spectacular writes
them into the schema), refused with the field and the value named, as every
input of the product (costapp/validation.py)."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import APIException

from analytics.errors import InvalidInput, shown
from analytics.moved import SORTABLE as MOVED_SORTABLE
from costapp.costs.selectors import BASES, DEFAULT_BASIS
from costapp.days import display_today
from costapp.economics.forms import DEFAULT_DAYS as PAGE_DEFAULT_DAYS
from costapp.economics.forms import MAX_DAYS as PAGE_MAX_DAYS
from costapp.filters import PRESETS, preset_window
from costapp.models import Deployment
from costapp.models.economics import GRAINS, SCOPES
from costapp.validation import ISO_DAY, date_in

DEFAULT_DAYS = 30
# Longest window per grain (days). Every stored grain has one: a grain added to
# the model without a bound here would fail at request time.
MAX_DAYS = {"hour": 31, "day": 366, "week": 3 * 366, "month": 10 * 366}
# Spend allocates the bill on read: a quarter at most per request.
MAX_SPEND_DAYS = 93
# Patterns are matched whole, as the schema's ECMA anchors mean: Python's $
# also matches before a final newline, so "chat\n" would pass ^...$ here and
# fail the schema. drf-spectacular writes \A and \Z as ^ and $.
NAME_PATTERN = r"\A[A-Za-z0-9_.:/@-]{1,100}\Z"
CURRENCY_PATTERN = r"\A[A-Z]{3}\Z"
# A rule name or a series as stored: what the product's name rule lets
# through (costapp/validation.py, name_problem: no control character, line
# separator or bidi control); another could never match, and NUL would not
# even reach PostgreSQL.
STORED_NAME = r"\A[^\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]{1,%d}\Z"
# The days date_in takes (2000-01-01..2100-12-31), as the schema states them:
# OpenAPI 3.0 has no bounds for a date, so the years are in a pattern beside
# format: date (which refuses 2026-02-30 and the like). tests/api/
# test_schemathesis_rules.py holds it to MIN_DATE and MAX_DATE.
DAY_PATTERN = r"^(20[0-9]{2}|2100)-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$"


class InvalidQuery(APIException):
    status_code = 400
    default_code = "invalid"

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__(detail="invalid query parameters")
        self.errors = errors


def named(raw: Any, errors: dict[str, Any]) -> dict[str, list[str]]:
    """Serializer errors as ``field='value': reason``."""
    out: dict[str, list[str]] = {}
    for field, reasons in errors.items():
        given = hasattr(raw, "get") and field in raw
        # A cross-field rule may fall on a parameter left to its default.
        said = f"{field}={shown(raw.get(field))}" if given else f"{field} (default)"
        items = reasons if isinstance(reasons, list) else [reasons]
        out[field] = [f"{said}: {r}" for r in items]
    return out


def validated(
    serializer_class: type[serializers.Serializer], request: Any
) -> dict[str, Any]:
    params = request.query_params
    serializer = serializer_class(data=params)
    known = set(serializer.fields) | {"page", "page_size"}
    errors: dict[str, list[str]] = {}
    for key in params:
        if key not in known:
            errors[key[:80]] = [
                f"{shown(key)}: not a parameter here; known: {', '.join(sorted(known))}"
            ]
        elif len(params.getlist(key)) > 1:
            errors[key] = [
                f"{key}: given {len(params.getlist(key))} times; once at most"
            ]
        elif params.get(key) == "":
            # Django's forms would read it as left out; a client that sends
            # ?start= meant something, and the schema says a value.
            errors[key] = [f"{key}='': empty; leave the parameter out for its default"]
    if not serializer.is_valid():
        errors.update(named(params, serializer.errors))
    if errors:
        raise InvalidQuery(errors)
    return dict(serializer.validated_data)


def strict(pattern: str, longest: int, **kwargs: Any) -> serializers.RegexField:
    """A text parameter matched as given: DRF would strip " chat" to "chat"
    and take it, which the schema's pattern refuses. ``longest`` is in the
    pattern too; as max_length the schema states it as maxLength."""
    return serializers.RegexField(
        pattern, max_length=longest, trim_whitespace=False, **kwargs
    )


@extend_schema_field({"type": "string", "format": "date", "pattern": DAY_PATTERN})
class BoundedDate(serializers.DateField):
    """A UTC day between 2000-01-01 and 2100-12-31, written YYYY-MM-DD."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("input_formats", ["%Y-%m-%d"])
        super().__init__(**kwargs)

    def to_internal_value(self, value: Any) -> date:
        # As given: date_in (like a page) strips " 2026-11-01", which the
        # schema's format refuses.
        if not isinstance(value, str) or not ISO_DAY.fullmatch(value):
            raise serializers.ValidationError("is not a date (YYYY-MM-DD)")
        # The product's one date reader: the same range and words as a page.
        try:
            return date_in(str(value), field=self.field_name or "date")
        except InvalidInput as exc:
            raise serializers.ValidationError(exc.reason) from None


class Window(serializers.Serializer):
    start = BoundedDate(
        help_text="First UTC day (YYYY-MM-DD); default: 30 days before end."
    )
    end = BoundedDate(
        help_text="UTC day after the last one (exclusive); default: tomorrow."
    )

    max_days = 366

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        end = attrs.get("end") or timezone.now().date() + timedelta(days=1)
        start = attrs.get("start") or end - timedelta(days=DEFAULT_DAYS)
        limit = self.max_days_for(attrs)
        if start >= end:
            raise serializers.ValidationError(
                {"end": f"must be after start={start.isoformat()}"}
            )
        if (end - start).days > limit:
            raise serializers.ValidationError(
                {"end": f"the window {start.isoformat()}..{end.isoformat()} is "
                        f"{(end - start).days} days; at most {limit}"}
            )  # fmt: skip
        attrs["start"], attrs["end"] = start, end
        return attrs

    def max_days_for(self, attrs: dict[str, Any]) -> int:
        return self.max_days


class FigureQuery(Window):
    scope = serializers.ChoiceField(
        choices=[s for s, _ in SCOPES], default="deployment"
    )
    name = strict(
        NAME_PATTERN, 100, required=False,
        help_text="One series (deployment, pool, team).",
    )  # fmt: skip
    grain = serializers.ChoiceField(choices=[g for g, _ in GRAINS], default="day")
    currency = strict(CURRENCY_PATTERN, 3, required=False)

    def max_days_for(self, attrs: dict[str, Any]) -> int:
        return MAX_DAYS[attrs.get("grain", "day")]


class PoolQuery(Window):
    pool = strict(NAME_PATTERN, 100, required=False)


class SpendQuery(Window):
    deployment = strict(
        NAME_PATTERN, 100, required=False,
        help_text="One deployment, or __idle__ / __unallocated__.",
    )  # fmt: skip
    basis = serializers.ChoiceField(choices=list(BASES), default=DEFAULT_BASIS)
    max_days = MAX_SPEND_DAYS


class EventQuery(Window):
    rule = strict(STORED_NAME % 100, 100, required=False)
    scope_name = strict(STORED_NAME % 200, 200, required=False)
    kind = serializers.ChoiceField(
        choices=["firing", "repeat", "resolved"], required=False
    )


class MovedQuery(Window):
    """A window of UTC days compared with the period of the same length
    before it (complete days only: the end is cut to today's UTC midnight)."""

    scope = serializers.ChoiceField(
        choices=["deployment", "team", "fleet"], required=False,
        help_text="Only this scope's series; default: every deployment, team and the fleet.",
    )  # fmt: skip
    name = strict(
        NAME_PATTERN, 100, required=False,
        help_text="One series of scope (needs scope).",
    )  # fmt: skip
    sort = serializers.ChoiceField(
        choices=[c for c in MOVED_SORTABLE] + [f"-{c}" for c in MOVED_SORTABLE],
        default="-change",
        help_text="A column; - first for descending; missing values last.",
    )
    max_days = 366

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if attrs.get("name") and not attrs.get("scope"):
            raise serializers.ValidationError({"name": "needs scope"})
        return attrs


class OverviewQuery(serializers.Serializer):
    """The overview page's window and scope, with its bounds and defaults
    (``/?preset=7d``, ``/?start=..&end=..&team=..``): a preset ends at the
    last complete UTC day; days run to any end, today's labelled partial."""

    preset = serializers.ChoiceField(
        choices=list(PRESETS), required=False,
        help_text="As on the page; custom (or none) takes start and end.",
    )  # fmt: skip
    start = BoundedDate(help_text="First UTC day; default: 90 days before end.")
    end = BoundedDate(
        help_text="UTC day after the last one (exclusive); default: today (UTC)."
    )
    team = strict(NAME_PATTERN, 100, required=False)
    deployment = strict(
        NAME_PATTERN, 100, required=False,
        help_text="One deployment (with team: of it).",
    )  # fmt: skip

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        today = display_today()
        preset = attrs.pop("preset", "custom")
        if preset != "custom":
            if "start" in attrs or "end" in attrs:
                # The page lets the preset win; a program gets told.
                raise serializers.ValidationError(
                    {"preset": "sets the days itself: give start/end without it "
                               "(or with preset=custom)"}
                )  # fmt: skip
            attrs["start"], attrs["end"] = preset_window(preset, today)
        end = attrs.get("end") or today
        start = attrs.get("start") or end - timedelta(days=PAGE_DEFAULT_DAYS["day"])
        longest = PAGE_MAX_DAYS["day"]
        if start >= end:
            raise serializers.ValidationError(
                {"end": f"must be after start={start.isoformat()}"}
            )
        if (end - start).days > longest:
            raise serializers.ValidationError(
                {"start": f"the window {start.isoformat()}..{end.isoformat()} is "
                          f"{(end - start).days} days; at most {longest}"}
            )  # fmt: skip
        for field, column in (("team", "team"), ("deployment", "name")):
            wanted = attrs.get(field)
            if wanted and not Deployment.objects.filter(**{column: wanted}).exists():
                raise serializers.ValidationError(
                    {field: f"not a {field} of the fleet"}
                )
        attrs["start"], attrs["end"], attrs["today"] = start, end, today
        return attrs
