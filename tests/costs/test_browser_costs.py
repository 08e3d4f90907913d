"""The costs pages in headless Chromium on the demo fleet: no sideways scroll
at 1024 and 1440 px, no console error or CSP violation, the breakdown's total
equal to the bill in the database, the range filter living in the URL."""

from __future__ import annotations

import sqlite3
from datetime import date, timedelta

import pytest

from costapp.formatting import money
from tests.fleet.test_browser import (  # noqa: F401  (module fixtures)
    SCREENSHOTS,
    DemoServer,
    _login,
    browser,
    server,
)
from tests.support.services import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def _open(d: object, url: str) -> None:
    d.get(url)  # type: ignore[attr-defined]
    wait_for(
        lambda: d.execute_script("return document.readyState") == "complete",  # type: ignore[attr-defined]
        timeout=30,
        what=url,
    )


def test_the_costs_pages_fit_the_screen_and_say_their_window(
    server: DemoServer,  # noqa: F811
    browser: object,  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By

    d = browser
    _login(d, server)
    con = sqlite3.connect(server.db)
    (day,) = con.execute(
        "SELECT substr(max(period_start), 1, 10) FROM costapp_costline"
    ).fetchone()
    pages = [
        "/costs/",
        "/costs/reconciliation/?start=2000-01-01&end=2100-01-01",
        "/costs/breakdown/?preset=90d",
        f"/costs/lines/?day={day}",
    ]
    d.get_log("browser")  # type: ignore[attr-defined]
    problems = []
    for width in (1024, 1440):
        d.set_window_size(width, 1000)  # type: ignore[attr-defined]
        for page in pages:
            _open(d, server.url + page)
            wide = d.execute_script(  # type: ignore[attr-defined]
                "return [document.documentElement.scrollWidth, window.innerWidth]"
            )
            if wide[0] > wide[1]:
                problems.append(f"{page} at {width} px scrolls sideways: {wide}")
            # Nor does a table scroll inside its card on the breakdown page.
            inner = d.execute_script(  # type: ignore[attr-defined]
                "return [...document.querySelectorAll('.breakdown-grid .card')]"
                ".filter(c => c.scrollWidth > c.clientWidth).length"
            )
            if inner:
                problems.append(f"{page} at {width} px: {inner} table(s) overflow")
            for entry in d.get_log("browser"):  # type: ignore[attr-defined]
                if entry.get("level") == "SEVERE" or "Refused to" in entry.get(
                    "message", ""
                ):
                    problems.append(f"{page}: {entry.get('message')}")
    assert not problems, "\n".join(problems)

    # The 30-day preset and its window, from the URL; the total from SQL.
    d.set_window_size(1440, 1000)  # type: ignore[attr-defined]
    _open(d, server.url + "/costs/breakdown/")
    d.find_element(By.LINK_TEXT, "last 7 days").click()  # type: ignore[attr-defined]
    wait_for(lambda: "preset=7d" in d.current_url, timeout=20, what="preset link")  # type: ignore[attr-defined]
    window = d.find_element(By.CSS_SELECTOR, "p.window").text  # type: ignore[attr-defined]
    first, last = [s.text for s in d.find_elements(By.CSS_SELECTOR, "p.window strong")]  # type: ignore[attr-defined]
    assert date.fromisoformat(last) - date.fromisoformat(first) == timedelta(days=6)
    assert "last 7 days" in window
    (total,) = con.execute(
        "SELECT SUM(amortized_cost) FROM costapp_costline"
        " WHERE substr(period_start, 1, 10) BETWEEN ? AND ?",
        (first, last),
    ).fetchone()
    kpi = d.find_element(By.CSS_SELECTOR, ".kpi .value").text  # type: ignore[attr-defined]
    assert kpi == money(float(total), "USD")
    d.save_screenshot(str(SCREENSHOTS / "breakdown.png"))  # type: ignore[attr-defined]
