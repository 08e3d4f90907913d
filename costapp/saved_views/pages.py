"""Which pages a view may be saved of, and how a saved view reads.

A saved path is resolved by the URLconf, never trusted as text: only the
product's data pages below qualify (a window or a filter worth keeping, read
with GET), and only those the user's role opens. An address elsewhere, the
admin site, the API, an export download or a form that writes is refused,
so a saved view's link never leaves the site nor lands on an action.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from django.urls import Resolver404, get_script_prefix, resolve

from costapp.filters import HOUR_PRESETS, PRESETS

# URL name -> how a list names the page (formatted with the URL's arguments).
SAVABLE: dict[str, str] = {
    "overview": "Overview",
    "economics:budgets": "Budgets",
    "economics:idle": "Idle",
    "economics:moved": "What moved",
    "economics:moved_explanation": "What moved: {scope} {name}",
    "economics:rightsizing": "Rightsizing",
    "economics:explanation": "Explanation {figure_id}",
    "costs:bills": "Bills",
    "costs:breakdown": "Breakdown",
    "costs:reconciliation": "Reconciliation",
    "costs:bill_lines": "Bill lines",
    "fleet:deployments": "Fleet",
    "fleet:deployment": "Deployment {name}",
    "telemetry:deployment": "Telemetry {name}",
    "capacity:index": "Capacity",
    "capacity:whatif": "What-if {deployment}",
    "capacity:mig": "MIG layouts",
    "capacity:search": "Configuration search",
    "capacity:scenarios": "Scenarios",
    "capacity:scenario_share": "Shared scenario",
    "alerts:log": "Alert log",
}
SAVABLE_TEXT = (
    "the overview and the economics, bills, fleet, telemetry, capacity and "
    "alert log pages"
)
MAX_PARAMETERS = 200
# Never kept: a GET form carries no CSRF token, but a hand-made link might,
# and a token has no business in a stored link.
DROPPED = frozenset({"csrfmiddlewaretoken"})
WINDOW_KEYS = frozenset({"preset", "start", "end", "partial"})


@dataclass(frozen=True)
class Page:
    url_name: str
    label: str
    right: str | None  # the read right its view checks


def page_of(path: str) -> Page | None:
    """The data page at ``path`` (as Django resolves it), or None."""
    try:
        match = resolve(path)
    except Resolver404:
        return None
    template = SAVABLE.get(match.view_name)
    if template is None:
        return None
    rights = getattr(match.func, "required_permissions", (None, None))
    try:
        label = template.format(**match.kwargs)
    except (KeyError, IndexError):
        label = template
    return Page(match.view_name, label, rights[0])


def path_problem(path: str, user: Any) -> str | None:
    """Why ``path`` cannot be saved by ``user``; None when it can."""
    # One leading slash and no backslash (browsers read "/\\host" as
    # "//host"): then nothing can be a scheme or another host.
    if not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "not a path of this site (one that starts with a single /)"
    if "?" in path or "#" in path:
        return "a path without ? or #: the query string is its own field"
    try:
        resolve(path)
    except Resolver404:
        return "no page of costapp is at this path"
    page = page_of(path)
    if page is None:
        return f"not a page a view can be saved of: only {SAVABLE_TEXT}"
    if page.right and not user.has_perm(page.right):
        return f"a page your role does not open (it needs {page.right})"
    return None


def query_canonical(query: str) -> str:
    """``query`` parsed and written again (one encoding of each character,
    no fragment); raises ValueError with the reason when it is no query."""
    if "#" in query:
        raise ValueError("a query string holds no #")
    try:
        pairs = parse_qsl(
            query.removeprefix("?"),
            keep_blank_values=True,
            max_num_fields=MAX_PARAMETERS,
        )
    except ValueError:
        raise ValueError(f"more than {MAX_PARAMETERS} parameters") from None
    return urlencode([(k, v) for k, v in pairs if k not in DROPPED])


def link(path: str, query: str) -> str:
    """The saved page's address: the path quoted (a team name may hold
    ``#`` or a space), under the site's prefix."""
    quoted = get_script_prefix().rstrip("/") + quote(path, safe="/")
    return f"{quoted}?{query}" if query else quoted


def _days(params: Mapping[str, list[str]]) -> str:
    start, end = params.get("start", [""])[0], params.get("end", [""])[0]
    if start and end:
        return f"UTC days {start} to {end} (exclusive; fixed)"
    return ""


def query_summary(query: str) -> str:
    """What a saved query string keeps, in words: the window (rolling or
    fixed), then the scope and the page's own choices."""
    params: dict[str, list[str]] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        params.setdefault(key, []).append(value)
    parts = []
    preset = params.get("preset", [""])[0]
    partial = params.get("partial", [""])[0] not in ("", "0", "false", "False")
    presets = {**PRESETS, **HOUR_PRESETS}
    if preset in presets and preset != "custom":
        now = " through the period in progress" if partial else ""
        parts.append(f"{presets[preset]}{now} (rolling)")
    elif days := _days(params):
        parts.append(days)
    else:
        parts.append("the page's default window")
    if team := params.get("team", [""])[0]:
        parts.append(f"team {team}")
    if picked := params.get("deployment", []):
        shown = ", ".join(picked[:3]) + (
            f" and {len(picked) - 3} more" if len(picked) > 3 else ""
        )
        parts.append(f"deployment{'s' if len(picked) > 1 else ''} {shown}")
    rest = [
        f"{k}={v}"
        for k, values in params.items()
        if k not in WINDOW_KEYS | {"team", "deployment"}
        for v in values
    ]
    if rest:
        parts.append(", ".join(rest))
    return "; ".join(parts)


def name_suggested(page: Page, query: str, *, limit: int) -> str:
    """A name for the save form to start from: the page and its window."""
    window = query_summary(query).split(";")[0]
    window = window.removesuffix(" (rolling)").removesuffix(" (exclusive; fixed)")
    if window == "the page's default window":
        return page.label[:limit]
    return f"{page.label} · {window}"[:limit]
