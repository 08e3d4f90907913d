"""The page cache serves a body only while nothing under it changed.

The version is the database's own record of writes (costapp/pagecache.py):
checked here through every kind of write, a rollback, a compaction and a
commit in another session, then through the pages themselves: a hit runs a
fraction of the queries and returns the same body, a write shows at once,
rights are part of the key, and an unreachable cache costs nothing but time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from costapp import pagecache
from costapp.models import AlertRule, AlertState, Deployment, TeamHoliday
from costapp.roles import FINANCE, TECH_LEAD
from tests.support.demo_data import demo_for_module
from tests.support.services import other_session
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("postgres_only")]

END = datetime(2026, 11, 30, tzinfo=UTC)


def holiday(team: str = "search") -> TeamHoliday:
    return TeamHoliday.objects.create(team=team, day=END.date(), name="cache test")


def test_every_costapp_table_but_the_unwatched_has_the_change_trigger() -> None:
    tables = {
        m._meta.db_table
        for m in apps.get_app_config("costapp").get_models(include_auto_created=True)
        if m._meta.managed  # Capability only holds permissions: no table
    }
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
            "WHERE t.tgname = 'costapp_data_changed'"
        )
        triggered = {name for (name,) in cursor.fetchall()}
    assert triggered == tables - pagecache.UNWATCHED_TABLES
    assert "costapp_unitcostfigure" in triggered and "costapp_costline" in triggered


def test_the_version_moves_with_every_write_and_stays_with_reads() -> None:
    seen = [pagecache.data_version()]
    row = holiday()  # the ORM's INSERT
    seen.append(pagecache.data_version())
    TeamHoliday.objects.filter(pk=row.pk).update(name="moved")
    seen.append(pagecache.data_version())
    with connection.cursor() as cursor:  # raw SQL, as from a shell
        cursor.execute("UPDATE costapp_teamholiday SET name = 'raw'")
    seen.append(pagecache.data_version())
    list(TeamHoliday.objects.all())  # a read
    assert pagecache.data_version() == seen[-1]
    TeamHoliday.objects.all().delete()
    seen.append(pagecache.data_version())
    assert None not in seen and len(set(seen)) == len(seen), seen


def test_a_rolled_back_savepoint_never_brings_its_version_back() -> None:
    holiday("a")
    before = pagecache.data_version()
    with pytest.raises(RuntimeError), transaction.atomic():
        holiday("b")
        inside = pagecache.data_version()
        raise RuntimeError("roll back")
    assert pagecache.data_version() == before
    holiday("c")  # different data, as many statements as inside the savepoint
    after = pagecache.data_version()
    assert after not in (before, inside)


def test_compaction_keeps_the_version_and_the_next_write_moves_it() -> None:
    holiday()
    before = pagecache.data_version()
    assert pagecache.changes_compact() >= 1
    assert pagecache.data_version() == before
    holiday("other")
    assert pagecache.data_version() != before


@pytest.mark.django_db(transaction=True)
def test_a_write_in_another_session_shows_only_once_it_commits() -> None:
    before = pagecache.data_version()
    with other_session() as other:
        other.execute(
            "INSERT INTO costapp_teamholiday (team, country, subdiv, day, name) "
            "VALUES ('search', '', '', '2026-11-30', 'elsewhere')"
        )
        assert pagecache.data_version() == before  # not committed yet
        other.commit()
        assert pagecache.data_version() != before


# --- the pages ------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(
    django_db_setup: None, django_db_blocker: pytest.FixtureRequest
) -> Iterator[None]:
    with demo_for_module(django_db_blocker, end=END, days=10):
        yield


def body(response: object) -> str:
    """The cached part: what follows the top bar (its log-out form carries a
    CSRF token per request)."""
    html = response.content.decode()  # type: ignore[attr-defined]
    return html.split("</header>", 1)[1]


def timed(client: Client, url: str) -> tuple[str, int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, url
    return body(response), len(queries)


# What a hit costs beyond any page (session, user, rights): the version, the
# deployment, the telemetry page's default window, whether the figures are
# behind the data (the note under the top bar, per request), and the user's
# last saved views (the top bar's list, per request).
HIT_QUERIES = 5

PAGES = (
    "/",
    "/fleet/chat/",
    "/telemetry/chat/?start=2026-11-24&end=2026-11-30",
    "/costs/",
    "/costs/breakdown/?preset=30d",
    "/costs/reconciliation/",
    "/economics/idle/?team=assistant",
)


@pytest.mark.parametrize("url", PAGES)
def test_a_hit_returns_the_same_body_for_a_fraction_of_the_queries(
    demo: None, client: Client, url: str
) -> None:
    client.force_login(user_in("lead", TECH_LEAD))
    with CaptureQueriesContext(connection) as trivial:
        assert client.get("/home/").status_code == 302
    first, cold = timed(client, url)
    second, warm = timed(client, url)
    assert second == first
    assert warm <= len(trivial) + HIT_QUERIES < cold, (len(trivial), cold, warm)


def test_a_write_shows_on_the_next_request(demo: None, client: Client) -> None:
    client.force_login(user_in("lead", TECH_LEAD))
    slo = Deployment.objects.get(name="chat").slo_ttft_p95_ms
    page, _ = timed(client, "/fleet/chat/")
    assert f"TTFT {slo:,.0f} ms" in page
    Deployment.objects.filter(name="chat").update(slo_ttft_p95_ms=4321)
    page, _ = timed(client, "/fleet/chat/")
    assert "TTFT 4,321 ms" in page


def test_rights_are_part_of_the_key(demo: None, client: Client) -> None:
    """A tech lead's overview links each deployment to its page; finance,
    who may not open those pages, gets its own body without the links."""
    link = re.compile(r'<a href="/fleet/chat/">chat</a>')
    client.force_login(user_in("lead", TECH_LEAD))
    assert link.search(timed(client, "/")[0])
    client.force_login(user_in("money", FINANCE))
    page, _ = timed(client, "/")
    assert "chat" in page and not link.search(page)


def test_cache_off_renders_every_time(
    demo: None, client: Client, settings: object
) -> None:
    settings.PAGE_CACHE_SECONDS = 0  # type: ignore[attr-defined]
    client.force_login(user_in("lead", TECH_LEAD))
    _, first = timed(client, "/")
    _, second = timed(client, "/")
    assert second == first > 15


def test_an_unreachable_cache_still_renders_the_page(
    demo: None, client: Client, settings: object
) -> None:
    settings.CACHES = {  # type: ignore[attr-defined]
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "pages": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
        },
    }
    client.force_login(user_in("lead", TECH_LEAD))
    page, _ = timed(client, "/fleet/chat/")
    assert "SLO p95" in page


def test_the_periodic_jobs_with_nothing_to_do_leave_the_version_alone(
    demo: None,
) -> None:
    """Beat runs these every 5 to 10 minutes: a job that wrote (even an
    UPDATE of no rows: the triggers are per statement) each time it found
    nothing to do would empty the cache every few minutes."""
    from django.utils import timezone

    from costapp.alerts.delivery import deliveries_reap
    from costapp.alerts.evaluation import alert_rules_evaluate
    from costapp.tasks import runs_reap_task

    def jobs() -> None:
        now = timezone.now()
        alert_rules_evaluate(now=now)
        deliveries_reap(now=now)
        runs_reap_task()

    for grain in ("hour", "day"):
        AlertRule.objects.create(
            name=f"drift-{grain}", metric="cost_per_1k_requests", grain=grain,
            condition="ratio", ratio=1.05,
        )  # fmt: skip
    jobs()  # the first evaluation may record what the demo's data fires
    assert AlertState.objects.exists()
    before = pagecache.data_version()
    jobs()
    assert pagecache.data_version() == before


# --- warmed after a refresh (costapp/pagewarm.py) --------------------------------


@pytest.fixture
def shared_cache(settings: object, redis_url: str) -> None:
    settings.CACHES = {  # type: ignore[attr-defined]
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "pages": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                  "LOCATION": redis_url},
    }  # fmt: skip


WARMED = ("/", "/fleet/chat/?preset=30d", "/telemetry/chat/")


def test_after_a_write_the_worker_renders_what_was_read_and_the_reader_hits_it(
    demo: None, shared_cache: None, client: Client, settings: object
) -> None:
    from costapp.pagewarm import pages_warm

    lead, lead2 = user_in("lead", TECH_LEAD), user_in("lead2", TECH_LEAD)
    money = user_in("money", FINANCE)
    for user, urls in ((lead, WARMED), (lead2, WARMED), (money, ("/",))):
        client.force_login(user)
        for url in urls:
            timed(client, url)
    holiday()  # a refresh's write: every body above is stale now
    warmed = pages_warm()
    # One replay per path and set of rights: lead2 reads what lead does.
    assert (warmed.replayed, warmed.failed) == (len(WARMED) + 1, 0)
    client.force_login(lead)
    with CaptureQueriesContext(connection) as trivial:
        client.get("/home/")
    for url in WARMED:
        page, queries = timed(client, url)
        assert queries <= len(trivial) + HIT_QUERIES, url  # a hit
        settings.PAGE_CACHE_SECONDS = 0  # type: ignore[attr-defined]
        assert timed(client, url)[0] == page, url  # what a render gives now
        settings.PAGE_CACHE_SECONDS = 300  # type: ignore[attr-defined]
    client.force_login(money)
    assert timed(client, "/")[1] <= len(trivial) + HIT_QUERIES


def test_a_replay_is_not_a_read_and_nothing_is_replayed_without_reads(
    demo: None, shared_cache: None, client: Client
) -> None:
    from costapp.pagewarm import pages_warm

    assert pages_warm().replayed == 0
    client.force_login(user_in("lead", TECH_LEAD))
    timed(client, "/")
    holiday()
    assert pages_warm().replayed == 1
    holiday("other")
    # The replay above did not renew the read: still one, not two.
    assert pages_warm(limit=5).replayed == 1


def test_without_a_shared_cache_nothing_is_warmed(demo: None, client: Client) -> None:
    from costapp.pagewarm import pages_warm

    client.force_login(user_in("lead", TECH_LEAD))
    timed(client, "/")
    warmed = pages_warm()
    assert (warmed.replayed, warmed.failed) == (0, 0)
