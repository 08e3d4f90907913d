"""The README's first command, driven end to end by headless Chromium.

Starts ``manage.py demo --serve`` on a temporary SQLite file, logs in as the
demo user, and checks the numbers the overview *plots* and *tabulates* against
the database, recomputed here with plain SQL (not with costapp's selectors).
"""

from __future__ import annotations

import math
import sqlite3
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.browser import DemoServer, chrome, demo_serving, require_browser
from tests.support.services import ROOT, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]

DAYS = 30
SCREENSHOTS = ROOT / "docs" / "screenshots"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_serving(tmp_path_factory.mktemp("demo"), days=DAYS) as demo:
        assert demo.password, "".join(demo.lines)
        yield demo


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    require_browser()
    driver = chrome(1400, 1000, hide_scrollbars=False)
    try:
        yield driver
    finally:
        driver.quit()


def _login(driver: object, server: DemoServer) -> None:
    from selenium.webdriver.common.by import By

    d = driver
    d.get(server.url + "/")  # type: ignore[attr-defined]
    if "/login/" not in d.current_url:  # type: ignore[attr-defined]
        return  # the session from an earlier test is still valid
    d.find_element(By.NAME, "username").send_keys("demo")  # type: ignore[attr-defined]
    d.find_element(By.NAME, "password").send_keys(server.password)  # type: ignore[attr-defined]
    d.find_element(By.CSS_SELECTOR, "form button, form [type=submit]").click()  # type: ignore[attr-defined]
    wait_for(lambda: "/login/" not in d.current_url, timeout=20, what="login")  # type: ignore[attr-defined]


def _billed(
    server: DemoServer, driver: object, today: date
) -> dict[tuple[str, str], float]:
    """The allocated bill per (deployment, day) from the finance CSV export.

    The export is a different reader than the overview; its rows for each day
    must add up to the day's bill in the database (checked here with SQL).
    """
    import csv
    import io
    import urllib.request

    start = today - timedelta(days=90)
    cookie = "; ".join(
        f"{c['name']}={c['value']}"
        for c in driver.get_cookies()  # type: ignore[attr-defined]
    )
    request = urllib.request.Request(
        f"{server.url}/costs/export.csv?start={start}&end={today}&basis=amortized",
        headers={"Cookie": cookie},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        rows = list(csv.DictReader(io.StringIO(response.read().decode())))
    per_day_total: dict[str, float] = defaultdict(float)
    billed: dict[tuple[str, str], float] = defaultdict(float)
    for row in rows:
        if not row["bill_amount"]:
            continue  # a provisional day: no bill yet
        amount = float(row["bill_amount"])
        per_day_total[row["period_start"]] += amount
        # "no share": a billed day none of which was the deployment's (its
        # traffic, a bill of 0); the overview prices that day provisionally.
        if not row["deployment"].startswith("__") and (
            "no share" not in row["allocation"]
        ):
            billed[(row["deployment"], row["period_start"])] += amount
    con = sqlite3.connect(server.db)
    for day, total in per_day_total.items():
        (bill,) = con.execute(
            "SELECT SUM(amortized_cost) FROM costapp_costline"
            " WHERE substr(period_start, 1, 10) = ?",
            (day,),
        ).fetchone()
        assert total == pytest.approx(float(bill), rel=1e-9, abs=1e-6), day
    con.close()
    assert billed, "the demo's bills were allocated to no deployment"
    return billed


def _expected(
    db: Path, today: date, billed: dict[tuple[str, str], float]
) -> tuple[dict, dict]:
    """Daily $/1k per deployment and 7-day table figures, from SQL alone for
    the provisional days and from the allocated bill where the day has one."""
    con = sqlite3.connect(db)
    rates = defaultdict(list)
    for gpu, inst, frm, price, gpus, unit in con.execute(
        "SELECT gpu_type, instance_type, effective_from, price, gpus_per_unit, unit "
        "FROM costapp_ratecard WHERE kind = 'list'"
    ):
        per_gpu = float(price) / (gpus if unit == "instance_hour" else 1)
        rates[(gpu, inst)].append((date.fromisoformat(frm), per_gpu))

    def rate(gpu: str, inst: str, day: date) -> float:
        return max((r for r in rates[(gpu, inst)] if r[0] <= day), default=(0, 0.0))[1]

    start = today - timedelta(days=90)
    rows = con.execute(
        "SELECT d.name, d.gpu_type, d.instance_type, substr(h.hour, 1, 10), "
        "SUM(h.gpu_seconds), SUM(h.requests_stop), SUM(h.requests_length), "
        "SUM(h.prompt_tokens + h.generation_tokens) "
        "FROM costapp_deploymenthour h JOIN costapp_deployment d "
        "ON d.id = h.deployment_id WHERE h.hour >= ? AND h.hour < ? "
        "GROUP BY d.name, substr(h.hour, 1, 10) ORDER BY d.name, 4",
        (start.isoformat(), today.isoformat()),
    ).fetchall()
    daily: dict[str, dict[str, float | None]] = defaultdict(dict)
    week: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for name, gpu, inst, day_s, seconds, stop_, length, tokens in rows:
        day = date.fromisoformat(day_s)
        cost = billed.get((name, day_s), seconds / 3600 * rate(gpu, inst, day))
        requests = stop_ + length
        daily[name][day_s] = cost / requests * 1000 if requests >= 100 else None
        if day >= today - timedelta(days=7):
            w = week[name]
            w["cost"] += cost
            w["requests"] += requests
            w["stop"] += stop_
            w["length"] += length
            w["tokens"] += tokens
            w["gpu_hours"] += seconds / 3600
    table = {
        name: {
            "requests": w["requests"],
            "cost": w["cost"],
            "per_1k": w["cost"] / w["requests"] * 1000,
            "per_1m": w["cost"] / w["tokens"] * 1e6,
            "gpu_hours": w["gpu_hours"],
            "truncation": w["length"] / (w["stop"] + w["length"]),
        }
        for name, w in week.items()
    }
    con.close()
    return daily, table


def test_the_overview_plots_and_tabulates_what_the_database_holds(
    server: DemoServer, browser: object
) -> None:
    from selenium.webdriver.common.by import By

    d = browser
    _login(d, server)
    d.get(server.url + "/")  # type: ignore[attr-defined]
    wait_for(
        lambda: d.execute_script(  # type: ignore[attr-defined]
            "var e = document.getElementById('cost-per-1k-chart');"
            "return !!(e && e.data && e.querySelector('.main-svg'));"
        ),
        timeout=30,
        what="the plotly chart",
    )
    plotted = d.execute_script(  # type: ignore[attr-defined]
        "return document.getElementById('cost-per-1k-chart').data.map("
        "t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)}));"
    )
    today = datetime.now(UTC).date()
    billed = _billed(server, d, today)
    daily, table = _expected(server.db, today, billed)
    assert {day for _, day in billed} < {x for days in daily.values() for x in days}

    assert {t["name"] for t in plotted} == set(daily) == {
        "chat", "classify", "code-assist", "moderation", "summarize",
    }  # fmt: skip
    points = 0
    for trace in plotted:
        expected = daily[trace["name"]]
        assert trace["x"] == sorted(expected), trace["name"]
        assert len(trace["x"]) >= DAYS - 2  # the scrape gap day still has hours
        for x, y in zip(trace["x"], trace["y"], strict=True):
            if expected[x] is None:
                assert y is None
            else:
                assert y == pytest.approx(expected[x], rel=1e-6), (trace["name"], x)
                points += 1
    assert points >= 5 * (DAYS - 2)

    cells = d.find_elements(By.CSS_SELECTOR, "#deployments td[data-col]")  # type: ignore[attr-defined]
    seen = 0
    for cell in cells:
        row = cell.find_element(By.XPATH, "./..").get_attribute("data-deployment")
        column = cell.get_attribute("data-col")
        value = float(cell.get_attribute("data-value"))
        assert value == pytest.approx(table[row][column], rel=1e-6), (row, column)
        if column == "cost":
            assert cell.text == f"${value:,.2f}"
        if column == "per_1k":
            assert cell.text.startswith("$")
        if column == "truncation":
            assert cell.text == f"{value * 100:.1f}%"
        assert cell.value_of_css_property("text-align") in ("right", "end")
        seen += 1
    assert seen == 5 * 6

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / "overview.png"
    d.save_screenshot(str(shot))  # type: ignore[attr-defined]
    assert shot.stat().st_size < 300_000


DEPLOYMENT_CHARTS = ("cost", "heatmap", "latency", "kv", "requests", "capacity")


def test_the_deployment_page_draws_the_four_views_of_its_telemetry(
    server: DemoServer, browser: object
) -> None:
    d = browser
    _login(d, server)
    d.get(server.url + "/fleet/chat/?preset=30d")  # type: ignore[attr-defined]
    wait_for(
        lambda: d.execute_script(  # type: ignore[attr-defined]
            "return arguments[0].every(k => {"
            "var e = document.getElementById('chart-' + k);"
            "return e && e.data && e.data.length > 0 && e.querySelector('.main-svg');"
            "});",
            list(DEPLOYMENT_CHARTS),
        ),
        timeout=60,
        what="the deployment charts",
    )
    plotted = d.execute_script(  # type: ignore[attr-defined]
        "var out = {}; arguments[0].forEach(k => { out[k] = "
        "document.getElementById('chart-' + k).data.map(t => ({name: t.name, "
        "type: t.type, yaxis: t.yaxis || 'y', x: Array.from(t.x || []), "
        "y: Array.from(t.y || []), z: t.z ? t.z.map(r => Array.from(r)) : null}));"
        "}); return out;",
        list(DEPLOYMENT_CHARTS),
    )
    for key, traces in plotted.items():
        for t in traces:
            assert len(t["x"]) <= 2000, (key, t["name"])
    latency = {t["name"]: t for t in plotted["latency"]}
    p95 = latency["ITL p95"]["y"]
    assert all(v is None or (0 < v < 1000 and not math.isnan(v)) for v in p95)
    assert latency["TTFT p95"]["yaxis"] != latency["ITL p95"]["yaxis"]
    # KV panel: preemptions per hour as stored (30 days: no aggregation).
    con = sqlite3.connect(server.db)
    stored = dict(
        con.execute(
            "SELECT strftime('%Y-%m-%d %H:00', h.hour), h.preemptions "
            "FROM costapp_deploymenthour h JOIN costapp_deployment d "
            "ON d.id = h.deployment_id WHERE d.name = 'chat'"
        ).fetchall()
    )
    con.close()
    preemptions = next(t for t in plotted["kv"] if t["name"] == "preemptions")
    checked = 0
    for x, y in zip(preemptions["x"], preemptions["y"], strict=True):
        if x in stored:
            assert y == pytest.approx(stored[x], rel=1e-6), x
            checked += 1
        else:
            assert y is None, x
    assert checked >= 24 * (DAYS - 2)
    # A GPU the autoscaler removed, or the scrape gap: a blank cell, not 0.
    heat = plotted["heatmap"][0]
    assert heat["type"] == "heatmap"
    assert any(v is None for row in heat["z"] for v in row)
    assert all(v is None or 0 <= v <= 1 for row in heat["z"] for v in row)
    for width in (1024, 1440):
        d.set_window_size(width, 1000)  # type: ignore[attr-defined]
        wait_for(
            lambda: d.execute_script(  # type: ignore[attr-defined]
                "return document.documentElement.scrollWidth <= "
                "document.documentElement.clientWidth;"
            ),
            timeout=10,
            what=f"no sideways scroll at {width} px",
        )
    d.set_window_size(1400, 1500)  # type: ignore[attr-defined]
    # Plotly redraws a responsive chart a moment after the window resizes.
    wait_for(
        lambda: d.execute_script(  # type: ignore[attr-defined]
            "return Array.from(document.querySelectorAll('.plot')).every(e => {"
            "var s = e.querySelector('.main-svg');"
            "return s && Math.abs(s.getBoundingClientRect().width - e.clientWidth)"
            " < 2;});"
        ),
        timeout=20,
        what="the charts redrawn at 1400 px",
    )
    d.execute_script(  # type: ignore[attr-defined]
        "document.getElementById('chart-heatmap').scrollIntoView();"
        "window.scrollBy(0, -60);"
    )
    shot = SCREENSHOTS / "deployment.png"
    d.save_screenshot(str(shot))  # type: ignore[attr-defined]
    d.set_window_size(1400, 1000)  # type: ignore[attr-defined]
    assert shot.stat().st_size < 300_000


def test_the_demo_command_reports_how_long_the_ingest_took(server: DemoServer) -> None:
    assert any("demo data:" in line for line in server.lines), server.lines


def test_no_page_the_demo_user_opens_violates_the_content_security_policy(
    server: DemoServer, browser: object
) -> None:
    d = browser
    _login(d, server)
    con = sqlite3.connect(server.db)
    (name,) = con.execute(
        "SELECT name FROM costapp_deployment ORDER BY name"
    ).fetchone()
    pages = [
        "/",
        "/home/",
        "/fleet/",
        f"/fleet/{name}/",
        "/costs/",
        "/costs/reconciliation/",
        "/telemetry/",
        f"/telemetry/{name}/",
        "/capacity/",
        f"/capacity/{name}/",
        "/capacity/mig/",
        "/capacity/search/",
        "/capacity/scenarios/",
        "/capacity/calibrations/",
    ]
    d.get_log("browser")  # type: ignore[attr-defined]  # drop earlier tests' messages
    violations = []
    for page in pages:
        d.get(server.url + page)  # type: ignore[attr-defined]
        wait_for(
            lambda: d.execute_script("return document.readyState") == "complete",  # type: ignore[attr-defined]
            timeout=30,
            what=page,
        )
        for entry in d.get_log("browser"):  # type: ignore[attr-defined]
            message = entry.get("message", "")
            if "Content Security Policy" in message or "Refused to" in message:
                violations.append(f"{page}: {message}")
    assert not violations, "\n".join(violations)
