"""Saved views: a page with its window and filters kept under a name, by its
user only. Saved from the top bar's link, listed, opened, renamed and
deleted; someone else's is a 404; each bound refused by field and value;
no CSRF token or form inside a cached page body."""

from __future__ import annotations

import html
import pickle
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.cache import caches
from django.test import Client

from costapp import pagecache
from costapp.models import Deployment, SavedView
from costapp.saved_views.services import MAX_PER_USER
from tests.support.users import user_in

pytestmark = pytest.mark.django_db

SAVE_LINK = re.compile(r'<a href="([^"]+)" id="save-view">Save this view</a>')


def logged_in(name: str, *groups: str) -> tuple[Client, object]:
    user = user_in(name, *groups)
    client = Client()
    client.force_login(user)
    return client, user


def text(response: object) -> str:
    return html.unescape(response.content.decode())  # type: ignore[attr-defined]


def save_link(page: str) -> str:
    found = SAVE_LINK.search(page)
    assert found, "no 'Save this view' link in the top bar"
    return html.unescape(found.group(1))


def save(client: Client, name: str, path: str, query: str = "") -> object:
    return client.post("/views/new/", {"name": name, "path": path, "query": query})


def test_a_finance_user_saves_the_bills_page_with_its_window_from_the_top_bar() -> None:
    client, user = logged_in("fin", "finance")
    page = client.get("/costs/?preset=7d&basis=unblended")
    assert page.status_code == 200
    link = save_link(page.content.decode())
    # The link carries the page's path and query string to an uncached form.
    wanted = parse_qs(urlsplit(link).query)
    assert urlsplit(link).path == "/views/new/"
    assert wanted == {"path": ["/costs/"], "query": ["preset=7d&basis=unblended"]}
    form = client.get(link)
    assert form.status_code == 200
    shown = text(form)
    assert 'value="Bills · last 7 days"' in shown  # a name to start from
    assert "last 7 days (rolling)" in shown
    assert "csrfmiddlewaretoken" in shown  # the form page itself is per request
    done = client.post(
        "/views/new/",
        {
            "name": "Last week, unblended",
            "path": "/costs/",
            "query": "preset=7d&basis=unblended",
        },
    )
    assert done.status_code == 302
    assert done["Location"] == "/costs/?preset=7d&basis=unblended"
    view = SavedView.objects.get(user=user)
    assert (view.name, view.path, view.query) == (
        "Last week, unblended",
        "/costs/",
        "preset=7d&basis=unblended",
    )
    back = text(client.get(done["Location"]))
    assert "Saved “Last week, unblended”" in back  # the message, outside the body
    assert '<a href="/costs/?preset=7d&basis=unblended"' in back  # the top bar list


def test_the_list_shows_only_ones_own_views_and_opens_each() -> None:
    mine, _ = logged_in("fin", "finance")
    theirs, _ = logged_in("lead", "tech lead")
    assert save(mine, "Spend 30d", "/", "preset=30d").status_code == 302
    assert (
        save(mine, "Breakdown by team", "/costs/breakdown/", "team=").status_code == 302
    )
    assert save(theirs, "Their idle", "/economics/idle/").status_code == 302
    page = text(mine.get("/views/"))
    assert "Spend 30d" in page and "Breakdown by team" in page
    assert "Their idle" not in page
    # Sorted by name, each a link to its page with the window it kept.
    assert page.index("Breakdown by team") < page.index("Spend 30d")
    assert '<a href="/?preset=30d">Spend 30d</a>' in page
    assert "last 30 days (rolling)" in page
    assert mine.get("/?preset=30d").status_code == 200
    # The top bar lists them on every page.
    assert '<a href="/?preset=30d" title=' in text(mine.get("/economics/idle/"))
    assert "Their idle" not in text(mine.get("/economics/idle/"))


def test_a_user_renames_and_deletes_their_own_view() -> None:
    client, user = logged_in("fin", "finance")
    save(client, "Old name", "/costs/reconciliation/", "preset=mtd")
    view = SavedView.objects.get(user=user)
    renamed = client.post(
        "/views/", {"action": "rename", "view": view.pk, "name": "Month so far"}
    )
    assert renamed.status_code == 302
    view.refresh_from_db()
    assert view.name == "Month so far" and view.query == "preset=mtd"
    gone = client.post("/views/", {"action": "delete", "view": view.pk})
    assert gone.status_code == 302
    assert not SavedView.objects.exists()
    assert "Deleted the saved view “Month so far”" in text(client.get("/views/"))


def test_someone_elses_view_is_not_found_and_stays_as_it_was() -> None:
    owner, _ = logged_in("owner", "finance")
    save(owner, "Mine", "/costs/")
    view = SavedView.objects.get()
    other, _ = logged_in("other", "tech lead")
    assert (
        other.post("/views/", {"action": "delete", "view": view.pk}).status_code == 404
    )
    rename = other.post("/views/", {"action": "rename", "view": view.pk, "name": "x"})
    assert rename.status_code == 404
    view.refresh_from_db()
    assert view.name == "Mine"
    assert "Mine" not in text(other.get("/views/"))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "x" * 101}, "name='" + "x" * 78 + "…: Ensure this value has at"),
        ({"name": "a\r\nb"}, "name='a\\r\\nb': "),
        ({"name": ""}, "name='': This field is required."),
        (
            {"path": "https://evil.example/costs/"},
            "path='https://evil.example/costs/': not a path of this site",
        ),
        (
            {"path": "//evil.example/"},
            "path='//evil.example/': not a path of this site",
        ),
        ({"path": "/\\evil.example/"}, "path='/\\\\evil.example/': not a path of this"),
        ({"path": "//[::1"}, "path='//[::1': not a path of this site"),
        ({"path": "http://[x/"}, "path='http://[x/': not a path of this site"),
        ({"path": "javascript:alert(1)"}, "path='javascript:alert(1)': not a path"),
        ({"path": "/admin/"}, "path='/admin/': not a page a view can be saved of"),
        ({"path": "/api/v1/spend/"}, "path='/api/v1/spend/': not a page a view can"),
        ({"path": "/api/tokens/"}, "path='/api/tokens/': not a page a view can be"),
        ({"path": "/views/"}, "path='/views/': not a page a view can be saved of"),
        ({"path": "/costs/export.csv"}, "path='/costs/export.csv': not a page a view"),
        ({"path": "/logout/"}, "path='/logout/': not a page a view can be saved of"),
        ({"path": "/nowhere/"}, "path='/nowhere/': no page of costapp is at this path"),
        ({"path": "/costs/?preset=7d"}, "path='/costs/?preset=7d': a path without ?"),
        # A finance user cannot open the fleet pages, so cannot save them.
        ({"path": "/fleet/"}, "path='/fleet/': a page your role does not open"),
        (
            {"query": "preset=7d&" + "a" * 2000},
            "query='preset=7d&" + "a" * 68 + "…: Ensure this value has at most 2000",
        ),
        ({"query": "a=1#frag"}, "query='a=1#frag': a query string holds no #"),
        ({"query": "a=\x00"}, "query='a=\\x00': contains a NUL byte"),
    ],
)
def test_each_refusal_names_the_field_and_the_value(
    fields: dict[str, str], message: str
) -> None:
    client, _ = logged_in("fin", "finance")
    data = {"name": "ok", "path": "/costs/", "query": "", **fields}
    response = client.post("/views/new/", data)
    assert response.status_code == 400
    assert message in text(response), text(response)[-3000:]
    assert not SavedView.objects.exists()


def test_a_refused_path_in_the_link_is_named_and_can_be_corrected() -> None:
    client, _ = logged_in("fin", "finance")
    response = client.get("/views/new/", {"path": "https://evil.example/"})
    assert response.status_code == 400
    page = text(response)
    assert "path='https://evil.example/': not a path of this site" in page
    assert 'name="path" value="https://evil.example/"' in page  # typed, not hidden
    assert 'id="saved-page"' not in page  # no link to it


def test_an_address_typed_on_the_form_is_saved() -> None:
    client, user = logged_in("fin", "finance")
    form = text(client.get("/views/new/"))
    assert 'type="text" name="path"' in form and 'type="text" name="query"' in form
    done = save(
        client, "Recon, last month", "/costs/reconciliation/", "?preset=last_month"
    )
    assert done.status_code == 302
    view = SavedView.objects.get(user=user)
    assert view.query == "preset=last_month"  # written again, without the "?"


def test_a_name_is_kept_once_per_user_whatever_its_case() -> None:
    client, _ = logged_in("fin", "finance")
    assert save(client, "Spend", "/").status_code == 302
    again = save(client, "SPEND", "/costs/")
    assert again.status_code == 400
    assert "name='SPEND': you have a saved view of this name already" in text(again)
    save(client, "Other", "/costs/")
    other = SavedView.objects.get(name="Other")
    clash = client.post(
        "/views/", {"action": "rename", "view": other.pk, "name": "spend"}
    )
    assert clash.status_code == 400
    assert "name='spend': you have a saved view of this name already" in text(clash)
    # Another user may use the same name.
    second, _ = logged_in("fin2", "finance")
    assert save(second, "Spend", "/").status_code == 302


def test_at_most_fifty_views_per_user() -> None:
    client, user = logged_in("fin", "finance")
    SavedView.objects.bulk_create(
        SavedView(user=user, name=f"view {i}", path="/", query=f"n={i}")
        for i in range(MAX_PER_USER)
    )
    refused = save(client, "one more", "/costs/")
    assert refused.status_code == 400
    assert (
        "name='one more': you keep 50 saved views, the most one user may; "
        "delete one first" in text(refused)
    )
    assert SavedView.objects.filter(user=user).count() == MAX_PER_USER


def test_a_rename_or_delete_without_a_known_action_is_refused_by_name() -> None:
    client, _ = logged_in("fin", "finance")
    response = client.post("/views/", {"action": "share", "view": "1"})
    assert response.status_code == 400
    assert "action='share': one of rename, delete" in text(response)
    full_width_one = "\uff11"
    bad = client.post("/views/", {"action": "delete", "view": full_width_one})
    assert bad.status_code == 400
    assert f"view='{full_width_one}': is not a whole number" in text(bad)


def test_a_tech_lead_saves_a_relative_telemetry_window() -> None:
    Deployment.objects.create(
        name="chat", engine="vllm", model_name="m", gpu_type="H100-80GB"
    )
    client, user = logged_in("lead", "tech lead")
    page = client.get("/telemetry/chat/?preset=24h&partial=1")
    link = save_link(page.content.decode())
    form = text(client.get(link))
    assert (
        'value="Telemetry chat · last 24 hours through the period in progress"' in form
    )
    assert (
        save(client, "chat now", "/telemetry/chat/", "preset=24h&partial=1").status_code
        == 302
    )
    assert SavedView.objects.get(user=user).query == "preset=24h&partial=1"


def test_no_save_link_where_a_view_cannot_be_saved() -> None:
    client, _ = logged_in("fin", "finance")
    for path in ("/views/", "/api/tokens/", "/views/new/"):
        assert not SAVE_LINK.search(client.get(path).content.decode()), path
    # Nor on the 403 page of a page the role does not open.
    refused = client.get("/fleet/")
    assert refused.status_code == 403
    assert not SAVE_LINK.search(refused.content.decode())
    # A user in no group has no saved views at all.
    nobody, _ = logged_in("nobody")
    assert 'id="saved-views"' not in nobody.get("/home/").content.decode()


@pytest.mark.usefixtures("postgres_only")
def test_cached_bodies_hold_no_token_and_a_save_leaves_them_cached() -> None:
    caches["pages"].clear()
    client, _ = logged_in("fin", "finance")
    first = client.get("/costs/?preset=30d")
    assert first.status_code == 200
    version = pagecache.data_version()
    assert save(client, "Month", "/costs/", "preset=30d").status_code == 302
    # A saved view is no data a body shows: every cached body stays valid.
    assert pagecache.data_version() == version
    again = client.get("/costs/?preset=30d").content.decode()
    assert '<a href="/costs/?preset=30d" title=' in again  # the top bar is fresh
    bodies = [
        pickle.loads(value).decode()
        if isinstance(pickle.loads(value), bytes)
        else str(pickle.loads(value))
        for value in caches["pages"]._cache.values()  # type: ignore[attr-defined]
    ]
    bodies = [b for b in bodies if "<" in b]
    assert bodies, "the bills page body was not cached"
    for body in bodies:
        assert "csrfmiddlewaretoken" not in body
        assert "save-view" not in body and "saved-views" not in body
