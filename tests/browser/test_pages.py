"""Every page each role reaches from the nav, in headless Chromium on the
demo: each chart drawn, no trace over 2,000 points, no sideways scroll at
1024 and 1440 px, no console error or CSP violation. Then the figures: what
the overview and the breakdown plot (``gd.data``) against SQL over the stored
bill and usage rows, and the filters changing the URL and the data."""

from __future__ import annotations

import math
import re
import sqlite3
import time
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.browser.conftest import Demo
from tests.fleet.test_browser import SCREENSHOTS, _expected
from tests.support.browser import chrome
from tests.support.services import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]

MAX_POINTS = 2000
WIDTHS = (1440, 1024)
# What each role's nav links to (PRODUCT.md's roles; docs/security.md).
READER_NAV = {
    "/",
    "/economics/budgets/",
    "/economics/idle/",
    "/economics/moved/",
    "/costs/",
    "/costs/breakdown/",
} | {"/costs/reconciliation/"}
LEAD_NAV = READER_NAV | {"/fleet/", "/telemetry/", "/capacity/", "/alerts/"}
NAV = {"finance": READER_NAV, "tech lead": LEAD_NAV, "admin": LEAD_NAV | {"/admin/"}}
# Links inside pages that open a page of another kind; one of each is walked.
DETAIL = [
    re.compile(p)
    for p in (
        r"^/fleet/[\w-]+/$",
        r"^/telemetry/[\w-]+/$",
        r"^/capacity/[\w-]+/$",
        r"^/economics/explain/\d+/$",
        r"^/economics/moved/(deployment|team|fleet)/[\w-]+/",
        r"^/costs/lines/\?day=",
        r"^/alerts/(channels|silences|log)/$",
        r"^/alerts/rules/\d+/$",
        r"^/costs/(backfill|focus)/$",
    )
]
SUBNAV = ".subnav a, .cap-sub a, main p.small a, main p.muted a"

DRAWN = """
var want = [...document.querySelectorAll('[data-figure]')].filter(function (el) {
  var node = document.getElementById(el.dataset.figure);
  if (!node) return false;
  var v = JSON.parse(node.textContent);
  if (typeof v === 'string') v = JSON.parse(v);
  if (v && el.dataset.figureKey) v = v[el.dataset.figureKey];
  return !!v;
}).length;
var have = [...document.querySelectorAll('.js-plotly-plot')]
  .filter(function (gd) { return gd.data && gd.querySelector('.main-svg'); }).length;
return [want, have];
"""
TRACES = """
return [...document.querySelectorAll('.js-plotly-plot')].map(function (gd) {
  return {id: gd.id, traces: gd.data.map(function (t) {
    var n = Math.max(t.x ? t.x.length : 0, t.y ? t.y.length : 0);
    return {name: t.name || '', type: t.type || 'scatter', points: n};
  })};
});
"""
PLOTTED = """
var gd = document.getElementById(arguments[0]);
return gd.data.map(function (t) {
  return {name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || [])};
});
"""


def _open(d: Any, url: str) -> None:
    d.get(url)
    wait_for(
        lambda: d.execute_script("return document.readyState") == "complete",
        timeout=60,
        what=url,
    )


def _wait_drawn(d: Any, page: str) -> None:
    def drawn() -> bool:
        want, have = d.execute_script(DRAWN)
        return bool(have >= want)

    wait_for(drawn, timeout=30, what=f"the charts of {page}")


def _links(d: Any, selector: str, base: str) -> list[str]:
    """Same-site paths the selector's links open (relative ``?`` links, the
    filter presets, are left to the figure tests)."""
    out = []
    for href in d.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(a => a.getAttribute('href'))",
        selector,
    ):
        href = (href or "").split("#")[0]
        if href.startswith(base):
            href = href[len(base) :]
        if href.startswith("/"):
            out.append(href)
    return out


def _console(d: Any, page: str) -> list[str]:
    problems = []
    for entry in d.get_log("browser"):
        message = entry.get("message", "")
        if (
            entry.get("level") == "SEVERE"
            or "Content Security Policy" in message
            or "Refused to" in message
        ):
            problems.append(f"{page}: console: {message}")
    return problems


# Text that reads as money ($, EUR, ...) outside an element marked with its
# currency (``data-currency``): every amount says what it is in, for a reader
# and for a script. Charts, code and form fields are not text the page states.
UNMARKED_MONEY = r"""
var re = /(^|[^A-Za-z0-9])(\$|€|£|USD |EUR |GBP )-?\d/;
var out = [];
var walker = document.createTreeWalker(document.querySelector('main') || document.body,
                                       NodeFilter.SHOW_TEXT);
while (walker.nextNode()) {
  var text = walker.currentNode.textContent, el = walker.currentNode.parentElement;
  if (!re.test(text)) continue;
  // The help pages' prose quotes amounts as examples, not figures.
  if (el.closest('[data-currency], script, style, code, pre, textarea, svg, .js-plotly-plot, .help-doc'))
    continue;
  out.push(el.tagName + ': ' + text.trim().slice(0, 60));
}
return out;
"""


def _check_page(d: Any, demo: Demo, page: str) -> list[str]:
    problems: list[str] = []
    d.set_window_size(WIDTHS[0], 1000)
    _open(d, demo.url + page)
    _wait_drawn(d, page)
    for chart in d.execute_script(TRACES):
        for trace in chart["traces"]:
            if trace["points"] > MAX_POINTS:
                problems.append(
                    f"{page}: #{chart['id']} trace {trace['name']!r} has "
                    f"{trace['points']} points"
                )
    for width in WIDTHS:
        d.set_window_size(width, 1000)
        wide = [0, 0]
        # Plotly resizes its charts on the window's resize event; give it a
        # moment before measuring.
        for _ in range(10):
            time.sleep(0.15)
            wide = d.execute_script(
                "return [document.documentElement.scrollWidth, window.innerWidth]"
            )
            if wide[0] <= wide[1]:
                break
        if wide[0] > wide[1]:
            problems.append(f"{page} at {width} px scrolls sideways: {wide}")
        # Nor does a table overflow its card: at 1440 px on any page, at
        # 1024 px on the breakdown, idle and pipeline pages (elsewhere a table
        # of a dozen columns may scroll inside its card there). The telemetry
        # page's raw hour and device tables (20 columns) scroll by design in
        # a ``.card.scroll``.
        cards = (
            ".card:not(.scroll)"
            if width >= 1440
            else ".breakdown-grid .card, .card:has(> table#idle), "
            ".card:has(> table#steps), .card:has(> table#rightsizing)"
        )
        inner = d.execute_script(
            f"return [...document.querySelectorAll('{cards}')]"
            ".filter(c => c.scrollWidth > c.clientWidth)"
            ".map(c => (c.querySelector('table') || c).id || c.className)"
        )
        if inner:
            problems.append(f"{page} at {width} px: table(s) overflow: {inner}")
    for text in d.execute_script(UNMARKED_MONEY)[:5]:
        problems.append(f"{page}: money without data-currency: {text}")
    problems += _console(d, page)
    return problems


def test_every_page_of_the_role_draws_fits_and_logs_nothing(
    demo: Demo, as_role: tuple[str, Any]
) -> None:
    role, d = as_role
    _open(d, demo.url + "/")
    nav = set(_links(d, ".topbar nav a", demo.url))
    assert nav == NAV[role], role
    d.get_log("browser")  # what the login left behind
    queue = sorted(p for p in nav if p != "/admin/")
    seen: set[str] = set()
    kinds: set[int] = set()
    problems: list[str] = []
    while queue:
        page = queue.pop(0)
        if page in seen:
            continue
        seen.add(page)
        problems += _check_page(d, demo, page)
        subnav = [p for p in _links(d, SUBNAV, demo.url) if "?" not in p]
        for path in subnav + _links(d, "main a", demo.url):
            if path in seen or path.endswith((".csv", ".zip")):
                continue
            if "/admin/" in path or "logout" in path:
                continue
            kind = next((i for i, p in enumerate(DETAIL) if p.search(path)), None)
            if kind is not None and kind not in kinds:
                kinds.add(kind)
                queue.append(path)
            elif kind is None and path in subnav:
                queue.append(path)
    assert len(seen) >= len(NAV[role]) - (role == "admin"), seen
    assert not problems, "\n".join(problems)


CAPACITY_PAGES = (
    "/capacity/chat/?a-kv_dtype=auto&b-gpu=H200&c-max_num_seqs=64",
    "/capacity/moderation/",
    "/capacity/mig/?gpu=A100-80GB&deployments=code-assist&deployments=moderation"
    "&layouts=3g%3Acode-assist%2B2x2g%3Amoderation%0A7g%0A4g%2B3g%0A7x1g",
    "/capacity/search/?deployment=chat&objective=cost_per_1k_requests"
    "&space_kv_dtype=auto,fp8&space_max_num_seqs=64,256&space_gpu=H100-SXM,H200"
    "&space_tp=4,8",
    "/economics/rightsizing/",
)


def test_the_capacity_pages_fit_the_screen_with_their_results(
    demo: Demo, drivers: Any
) -> None:
    """What-if, MIG, search and rightsizing with results on them (the crawl
    opens MIG and search empty), at 1024 and 1440 px."""
    d = drivers["tech lead"]
    problems: list[str] = []
    for page in CAPACITY_PAGES:
        problems += _check_page(d, demo, page)
    d.set_window_size(1440, 1000)
    assert not problems, "\n".join(problems)


def test_the_help_pages_fit_the_screen(demo: Demo, drivers: Any) -> None:
    """The docs as pages (wide tables and long code lines scroll in their
    own box), as finance, the least rights that open them."""
    from costapp.views.help import TOPICS

    d = drivers["finance"]
    problems: list[str] = []
    for page in ["/help/", *(f"/help/{name}/" for name in TOPICS)]:
        problems += _check_page(d, demo, page)
    d.set_window_size(1440, 1000)
    assert not problems, "\n".join(problems)


def test_the_telemetry_pages_fit_the_screen(demo: Demo, drivers: Any) -> None:
    d = drivers["tech lead"]
    problems = []
    for page in ("/telemetry/", "/telemetry/chat/"):
        _open(d, demo.url + page)
        for width in WIDTHS:
            d.set_window_size(width, 1000)
            time.sleep(0.3)
            wide = d.execute_script(
                "return [document.documentElement.scrollWidth, window.innerWidth]"
            )
            if wide[0] > wide[1]:
                problems.append(f"{page} at {width} px: {wide}")
    d.set_window_size(1440, 1000)
    assert not problems, problems


# -- figures --------------------------------------------------------------------


def _rows(demo: Demo, sql: str, *args: object) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(demo.db)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def _export_rows(d: Any, demo: Demo, query: str) -> list[dict[str, str]]:
    """The finance CSV (another reader than the pages) with the browser's
    session; its rows per day are checked against SQL before use."""
    import csv
    import io
    import urllib.request

    cookie = "; ".join(f"{c['name']}={c['value']}" for c in d.get_cookies())
    request = urllib.request.Request(
        f"{demo.url}/costs/export.csv?{query}", headers={"Cookie": cookie}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        rows = list(csv.DictReader(io.StringIO(response.read().decode())))
    per_day: dict[str, float] = defaultdict(float)
    for row in rows:
        if row["bill_amount"]:
            per_day[row["period_start"]] += float(row["bill_amount"])
    sql = dict(
        _rows(
            demo,
            "SELECT substr(period_start, 1, 10), SUM(amortized_cost) "
            "FROM costapp_costline GROUP BY 1",
        )
    )
    for day, total in per_day.items():
        assert total == pytest.approx(float(sql[day]), rel=1e-9, abs=1e-6), day
    return rows


def _choose(d: Any, *, team: str = "", deployment: str = "") -> None:
    """Pick a team or a deployment in the filter bar and press Show."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    form = d.find_element(By.ID, "filters")
    if team:
        Select(form.find_element(By.NAME, "team")).select_by_value(team)
    if deployment:
        form.find_element(By.CSS_SELECTOR, "details.pick summary").click()
        form.find_element(
            By.CSS_SELECTOR, f"input[name=deployment][value='{deployment}']"
        ).click()
    before = d.current_url
    form.find_element(By.CSS_SELECTOR, "button").click()
    wait_for(lambda: d.current_url != before, timeout=30, what="the filtered page")
    wait_for(
        lambda: d.execute_script("return document.readyState") == "complete",
        timeout=60,
        what="the filtered page",
    )


def test_the_overview_plots_what_the_rows_hold_and_follows_the_team(
    demo: Demo, finance: Any
) -> None:
    from selenium.webdriver.common.by import By

    d = finance
    d.set_window_size(1440, 1000)
    _open(d, demo.url + "/")
    _wait_drawn(d, "/")
    today = datetime.now(UTC).date()
    rows = _export_rows(
        d, demo, f"start={today - timedelta(days=90)}&end={today}&basis=amortized"
    )
    billed: dict[tuple[str, str], float] = defaultdict(float)
    for row in rows:
        if row["bill_amount"] and not row["deployment"].startswith("__"):
            if "no share" not in row["allocation"]:
                billed[(row["deployment"], row["period_start"])] += float(
                    row["bill_amount"]
                )
    daily, _table = _expected(demo.db, today, billed)

    def check(plotted: list[dict[str, Any]], names: set[str]) -> int:
        assert {t["name"] for t in plotted} == names
        points = 0
        for trace in plotted:
            expected = daily[trace["name"]]
            assert trace["x"] == sorted(expected), trace["name"]
            for x, y in zip(trace["x"], trace["y"], strict=True):
                if expected[x] is None:
                    assert y is None, (trace["name"], x)
                else:
                    assert y == pytest.approx(expected[x], rel=1e-6), (trace["name"], x)
                    points += 1
        return points

    everyone = d.execute_script(PLOTTED, "cost-per-1k-chart")
    assert check(everyone, set(daily)) >= 5 * (30 - 2)
    teams = dict(_rows(demo, "SELECT name, team FROM costapp_deployment"))
    trust = {n for n, t in teams.items() if t == "trust"}
    assert len(trust) == 2

    _choose(d, team="trust")
    assert parse_qs(urlsplit(d.current_url).query)["team"] == ["trust"]
    _wait_drawn(d, "/?team=trust")
    scoped = d.execute_script(PLOTTED, "cost-per-1k-chart")
    assert check(scoped, trust) >= 2 * (30 - 2)
    table = {
        e.get_attribute("data-deployment")
        for e in d.find_elements(By.CSS_SELECTOR, "#deployments tr[data-deployment]")
    }
    assert table == trust
    assert d.find_element(By.ID, "scope-shown").text == "team trust"
    # The team's own stored series replaces the fleet's band chart.
    bands = d.execute_script(
        "return [...document.querySelectorAll('[id^=fleet-band-]')]"
        ".map(gd => gd.layout.title.text)"
    )
    assert bands and all(t.startswith("Team trust") for t in bands), bands
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / "overview-team.png"
    d.save_screenshot(str(shot))
    assert shot.stat().st_size < 300_000


def _bill_days_sql(demo: Demo, first: date, last: date) -> dict[str, float]:
    return {
        day: float(total)
        for day, total in _rows(
            demo,
            "SELECT substr(period_start, 1, 10), SUM(amortized_cost) "
            "FROM costapp_costline WHERE substr(period_start, 1, 10) BETWEEN ? AND ? "
            "GROUP BY 1",
            first.isoformat(),
            last.isoformat(),
        )
    }


def _bars(d: Any) -> dict[str, float]:
    plotted = d.execute_script(PLOTTED, "bill-days-chart")
    out: dict[str, float] = {}
    for trace in plotted:
        if trace["name"].startswith("bill"):
            for x, y in zip(trace["x"], trace["y"], strict=True):
                assert x not in out, x
                out[x] = y
    return out


def test_the_breakdown_plots_the_bill_the_rows_hold_and_follows_the_filters(
    demo: Demo, finance: Any
) -> None:
    from selenium.webdriver.common.by import By

    d = finance
    d.set_window_size(1440, 1000)
    _open(d, demo.url + "/costs/breakdown/")
    d.find_element(By.CSS_SELECTOR, "a[data-preset='7d']").click()
    wait_for(lambda: "preset=7d" in d.current_url, timeout=30, what="the 7-day link")
    _wait_drawn(d, "breakdown 7d")
    shown = d.find_element(By.ID, "window-shown")
    first = date.fromisoformat(shown.get_attribute("data-start"))
    end = date.fromisoformat(shown.get_attribute("data-end"))
    assert (end - first).days == 7 and "last 7 days" in shown.text
    (week,) = _rows(
        demo,
        "SELECT SUM(amortized_cost) FROM costapp_costline"
        " WHERE substr(period_start, 1, 10) BETWEEN ? AND ?",
        first.isoformat(),
        (end - timedelta(days=1)).isoformat(),
    )[0]
    kpi = d.find_element(By.CSS_SELECTOR, ".kpi .value").text
    assert kpi == f"${float(week):,.2f}"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / "breakdown.png"
    d.save_screenshot(str(shot))
    assert shot.stat().st_size < 300_000
    _open(d, demo.url + "/costs/breakdown/?preset=30d")
    _wait_drawn(d, "breakdown 30d")
    shown = d.find_element(By.ID, "window-shown")
    first = date.fromisoformat(shown.get_attribute("data-start"))
    end = date.fromisoformat(shown.get_attribute("data-end"))
    expected = _bill_days_sql(demo, first, end - timedelta(days=1))
    bars = _bars(d)
    assert set(bars) == set(expected) and len(bars) >= 20
    for day, value in bars.items():
        assert value == pytest.approx(expected[day], rel=1e-9), day
    estimated = {
        day
        for (day,) in _rows(
            demo,
            "SELECT DISTINCT substr(period_start, 1, 10) FROM costapp_costline "
            "WHERE estimated",
        )
    }
    plotted = d.execute_script(PLOTTED, "bill-days-chart")
    marked = next(t for t in plotted if t["name"] == "bill (estimated)")["x"]
    assert set(marked) == estimated & set(expected) and marked

    # One deployment: the bars become its allocated share, as the finance
    # export (checked against SQL per day) allocates it.
    _choose(d, deployment="summarize")
    query = parse_qs(urlsplit(d.current_url).query)
    assert query["deployment"] == ["summarize"]
    _wait_drawn(d, "breakdown summarize")
    rows = _export_rows(d, demo, f"start={first}&end={end}&basis=amortized")
    share: dict[str, float] = defaultdict(float)
    for row in rows:
        if row["deployment"] == "summarize" and row["bill_amount"]:
            share[row["period_start"]] += float(row["bill_amount"])
    scoped = _bars(d)
    assert set(scoped) == set(expected)
    for day, value in scoped.items():
        assert value == pytest.approx(share.get(day, 0.0), rel=1e-9, abs=1e-9), day
    assert sum(scoped.values()) < 0.9 * sum(bars.values())
    shot = SCREENSHOTS / "breakdown-filtered.png"
    d.save_screenshot(str(shot))
    assert shot.stat().st_size < 300_000

    # The same filter on the bills and reconciliation pages, from the link.
    tail = urlsplit(d.current_url).query
    _open(d, f"{demo.url}/costs/reconciliation/?{tail}")
    names = {
        e.text
        for e in d.find_elements(
            By.CSS_SELECTOR, "#reconciliation tbody td:nth-child(2)"
        )
    }
    assert names == {"summarize"}
    _open(d, f"{demo.url}/costs/?{tail}")
    selected = d.find_element(By.CSS_SELECTOR, "[data-kpi='selected-USD']").text
    assert selected == f"${sum(share.values()):,.2f}"
    shot = SCREENSHOTS / "bills.png"
    d.save_screenshot(str(shot))
    assert shot.stat().st_size < 300_000


def test_a_first_visit_logs_nothing_either(demo: Demo) -> None:
    """The role tests drop what the login page left in the console; a fresh
    browser on it asks for the site's icon too, which was a 404 there."""
    d = chrome(1024, 800)
    try:
        _open(d, demo.url + "/login/")
        time.sleep(0.5)  # the icon request follows the page
        assert _console(d, "/login/") == []
    finally:
        d.quit()


def test_what_moved_lists_every_deployment_and_its_parts_sum_to_each_change(
    demo: Demo, drivers: Any
) -> None:
    d = drivers["finance"]
    _open(d, demo.url + "/economics/moved/?preset=7d")
    rows = d.execute_script(
        "return [...document.querySelectorAll('#moved tbody tr')].map(tr => ({"
        "scope: tr.dataset.scope, name: tr.dataset.name,"
        "change: tr.querySelector('[data-change]').dataset.change,"
        "parts: [...tr.querySelectorAll('[data-part]')].map(td => td.dataset.value)}))"
    )
    listed = {r["name"] for r in rows if r["scope"] == "deployment"}
    assert listed == {n for (n,) in _rows(demo, "select name from costapp_deployment")}
    assert any(r["scope"] == "fleet" for r in rows)
    summed = 0
    for r in rows:
        if r["change"] and all(r["parts"]):
            parts = [float(v) for v in r["parts"]]
            assert len(parts) == 5
            assert math.fsum(parts) == pytest.approx(
                float(r["change"]), rel=1e-9, abs=1e-12
            ), r
            summed += 1
    assert summed >= len(listed)
    assert "Complete UTC days only" in d.find_element("id", "compared").text
