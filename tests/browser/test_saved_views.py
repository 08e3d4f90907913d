"""Saved views and the telemetry page's relative windows in headless
Chromium on the demo: saved from the top bar's link, found again in the top
bar's menu and on the list page, opened; the pages fit 1024 and 1440 px
(menu open included), state no unmarked money and log nothing."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser.conftest import Demo, Drivers
from tests.browser.test_pages import WIDTHS, _check_page, _console, _open
from tests.support.services import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def _save(d: Any, demo: Demo, page: str, name: str) -> None:
    """Open ``page``, follow "Save this view", name it and save."""
    from selenium.webdriver.common.by import By

    _open(d, demo.url + page)
    d.find_element(By.ID, "save-view").click()
    wait_for(lambda: "/views/new/" in d.current_url, timeout=30, what="the save form")
    field = d.find_element(By.ID, "id_name")
    field.clear()
    field.send_keys(name)
    d.find_element(By.CSS_SELECTOR, "#save-view-form button").click()
    wait_for(lambda: "/views/new/" not in d.current_url, timeout=30, what="the save")
    wait_for(
        lambda: d.execute_script("return document.readyState") == "complete",
        timeout=60,
        what=page,
    )
    current = urlsplit(d.current_url)
    assert f"{current.path}?{current.query}" == page  # back on the page saved


def _menu_fits(d: Any) -> list[str]:
    """The top bar's saved views menu, opened, at each width: inside the
    window, nothing scrolls sideways."""
    from selenium.webdriver.common.by import By

    problems = []
    menu = d.find_element(By.ID, "saved-views")
    if menu.get_attribute("open") is None:
        menu.find_element(By.TAG_NAME, "summary").click()
    for width in WIDTHS:
        d.set_window_size(width, 1000)
        time.sleep(0.2)
        left, right, inner, scroll = d.execute_script(
            "var r = document.querySelector('#saved-views .saved-menu')"
            ".getBoundingClientRect();"
            "return [r.left, r.right, window.innerWidth,"
            " document.documentElement.scrollWidth];"
        )
        if left < 0 or right > inner or scroll > inner:
            problems.append(
                f"menu at {width} px: {left}..{right} of {inner} ({scroll})"
            )
    menu.find_element(By.TAG_NAME, "summary").click()  # closed again
    d.set_window_size(WIDTHS[0], 1000)
    return problems


def test_a_finance_user_saves_a_view_and_opens_it_from_the_menu_and_the_list(
    demo: Demo, drivers: Drivers
) -> None:
    from selenium.webdriver.common.by import By

    d = drivers["finance"]
    d.set_window_size(WIDTHS[0], 1000)
    d.get_log("browser")
    _save(d, demo, "/costs/breakdown/?preset=7d", "Breakdown, last 7 days")
    assert (
        "Saved “Breakdown, last 7 days”"
        in d.find_element(By.CSS_SELECTOR, ".messages").text
    )
    problems = _menu_fits(d)
    d.find_element(By.CSS_SELECTOR, "#saved-views summary").click()
    item = d.find_element(By.LINK_TEXT, "Breakdown, last 7 days")
    assert item.get_attribute("href").endswith("/costs/breakdown/?preset=7d")
    d.find_element(By.ID, "saved-views-all").click()
    wait_for(lambda: d.current_url.endswith("/views/"), timeout=30, what="the list")
    row = d.find_element(By.CSS_SELECTOR, "#saved-views-table tbody tr")
    assert "last 7 days (rolling)" in row.text
    problems += _check_page(d, demo, "/views/")
    # The rename control opens in its row without widening the page.
    _open(d, demo.url + "/views/")
    d.find_element(By.CSS_SELECTOR, "details.rename summary").click()
    for width in WIDTHS:
        d.set_window_size(width, 1000)
        time.sleep(0.2)
        wide = d.execute_script(
            "var card = document.querySelector('.card:has(> #saved-views-table)');"
            "return [document.documentElement.scrollWidth, window.innerWidth,"
            " card.scrollWidth, card.clientWidth]"
        )
        if wide[0] > wide[1] or wide[2] > wide[3]:
            problems.append(f"/views/ with rename open at {width} px: {wide}")
    d.set_window_size(WIDTHS[0], 1000)
    d.find_element(By.LINK_TEXT, "Breakdown, last 7 days").click()
    wait_for(lambda: "preset=7d" in d.current_url, timeout=30, what="the saved view")
    problems += _console(d, "the saved view")
    assert not problems, "\n".join(problems)


def test_a_tech_lead_saves_the_last_24_hours_of_telemetry(
    demo: Demo, drivers: Drivers
) -> None:
    from selenium.webdriver.common.by import By

    d = drivers["tech lead"]
    problems = _check_page(d, demo, "/telemetry/chat/?preset=24h&partial=1")
    window = d.find_element(By.ID, "window").text
    assert window.startswith("Showing UTC hours"), window
    assert "last 24 hours; the hour from" in window and "partial" in window
    # The preset links keep the hour in progress; one click changes the range.
    d.find_element(By.CSS_SELECTOR, "a[data-preset='6h']").click()
    wait_for(lambda: "preset=6h" in d.current_url, timeout=30, what="6 hours")
    assert "partial=1" in d.current_url
    problems += _check_page(
        d, demo, "/views/new/?path=/telemetry/chat/&query=preset%3D24h"
    )
    _save(d, demo, "/telemetry/chat/?preset=24h", "chat, last day")
    problems += _menu_fits(d)
    assert not problems, "\n".join(problems)
