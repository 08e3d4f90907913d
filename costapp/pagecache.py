"""Rendered page bodies, cached until the data under them changes.

The overview, the deployment page and the telemetry page read a year of
stored figures and draw up to 2,000 points per trace: 60-100 ms of Python per
request; the bills, breakdown, reconciliation and idle pages 70-320 ms. Their body (everything under the top bar) depends only on the data,
the query string, the day, the user's rights and the code, so it is rendered
once per such key and kept in the ``pages`` cache. The top bar (user name,
CSRF token of the log-out form, messages) is rendered per request around it.

When is an entry stale? Whenever any costapp table was written since it was
rendered. ``data_version()`` is one query over ``costapp.models.changes``:
a statement-level trigger on every costapp table (installed after each
``migrate`` by ``change_triggers_install``, so a table a later migration adds
is covered without anyone remembering) records each writing transaction. The
version is (committed writing transactions, last statement number): the
first grows with every commit that a reader's snapshot sees, the second with
every statement and never repeats after a rollback. A reader that takes the
version just before a commit and reads the data just after stores the newer
body under the older version, which no later request asks for: an entry can
be wasted, never stale.

What the version cannot see is time passing: a new UTC day is in the key, and
entries expire after ``PAGE_CACHE_SECONDS`` (300 s by default; 0 turns the
cache off) for anything else that depends on the clock. A statement that
writes no row counts too (the triggers are per statement, so that a COPY of a
million rows costs one record, not a million): a periodic job checks before
it writes, as ``runs_reap_task`` does. Tables that requests themselves write
(the audit log on every POST, API tokens' last use) have no trigger, else
reading the product would empty its cache; none of them is on a cached page.

SQLite (the embedded demo) has row triggers only and a single writer, and its
pages are small: there the bodies are rendered every time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
from django.db import connection, connections
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from costapp.days import display_today

logger = logging.getLogger(__name__)

# Written by requests themselves, and shown on no cached page.
UNWATCHED_TABLES = frozenset(
    {
        "costapp_datachange",
        "costapp_datachangetotal",
        "costapp_auditentry",
        "costapp_apitoken",
        # Leases renewed every few seconds by working steps; the "figures
        # older than the data" note reads it outside the cached body.
        "costapp_pipelinestep",
        # Stamped by every evaluation; shown on the alert pages, never cached.
        "costapp_alertruleevaluated",
        # A user's saved views: shown in the top bar and on their own list,
        # never in a cached body; a save must not empty everyone's cache.
        "costapp_savedview",
    }
)

CHANGE_FUNCTION = """
CREATE OR REPLACE FUNCTION costapp_data_changed() RETURNS trigger AS $$
BEGIN
    INSERT INTO costapp_datachange (txid, last_statement)
    VALUES (txid_current(), nextval('costapp_datachange_statement'))
    ON CONFLICT (txid) DO UPDATE SET last_statement = EXCLUDED.last_statement;
    RETURN NULL;
END $$ LANGUAGE plpgsql
"""
CHANGE_TRIGGER = """
CREATE OR REPLACE TRIGGER costapp_data_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table}
    FOR EACH STATEMENT EXECUTE FUNCTION costapp_data_changed()
"""
# Sums and maxima, so a missing total row (a test's TRUNCATE) reads as 0.
VERSION_SQL = """
SELECT
    (SELECT COALESCE(sum(transactions), 0) FROM costapp_datachangetotal)
        + (SELECT count(*) FROM costapp_datachange),
    GREATEST(
        (SELECT COALESCE(max(last_statement), 0) FROM costapp_datachangetotal),
        (SELECT COALESCE(max(last_statement), 0) FROM costapp_datachange))
"""
# Deletes and folds in one statement: a reader sees both or neither.
COMPACT_SQL = """
WITH gone AS (DELETE FROM costapp_datachange RETURNING last_statement)
INSERT INTO costapp_datachangetotal (id, transactions, last_statement)
SELECT 1, count(*), COALESCE(max(last_statement), 0) FROM gone
ON CONFLICT (id) DO UPDATE SET
    transactions = costapp_datachangetotal.transactions + EXCLUDED.transactions,
    last_statement = GREATEST(
        costapp_datachangetotal.last_statement, EXCLUDED.last_statement)
RETURNING (SELECT count(*) FROM gone)
"""


def watched_tables(using: str = "default") -> list[str]:
    """Every costapp table whose writes change what a page shows."""
    names = connections[using].introspection.table_names()
    return sorted(
        n for n in names if n.startswith("costapp_") and n not in UNWATCHED_TABLES
    )


def change_triggers_install(using: str = "default") -> int:
    """Attach the change trigger to every watched table (idempotent); returns
    how many. Run after each ``migrate`` (``costapp.apps``)."""
    db = connections[using]
    if db.vendor != "postgresql":
        return 0
    tables = watched_tables(using)
    with db.cursor() as cursor:
        cursor.execute(CHANGE_FUNCTION)
        for table in tables:
            cursor.execute(CHANGE_TRIGGER.format(table=db.ops.quote_name(table)))
    return len(tables)


def changes_compact(using: str = "default") -> int:
    """Fold the committed change rows into the total; returns how many.
    Rows of transactions still open are invisible here and stay."""
    db = connections[using]
    if db.vendor != "postgresql":
        return 0
    with db.cursor() as cursor:
        cursor.execute(COMPACT_SQL)
        (folded,) = cursor.fetchone()
    return int(folded)


def data_version() -> str | None:
    """The version of everything the pages read, or None where there is no
    record of changes (SQLite)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(VERSION_SQL)
        transactions, statement = cursor.fetchone()
    return f"{transactions}.{statement}"


@cache
def code_version() -> str:
    """A hash of the code and templates a body is rendered from, so a deploy
    never serves a body the previous release rendered (the Redis cache
    outlives the processes). Read once per process: about 300 files."""
    digest = hashlib.sha256()
    base = Path(settings.BASE_DIR)
    for folder, pattern in (
        ("costapp", "*.py"),
        ("analytics", "*.py"),
        ("templates", "*.html"),
        ("static", "*"),
    ):
        for path in sorted((base / folder).rglob(pattern)):
            if path.is_file():
                digest.update(str(path.relative_to(base)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def rights_of(user: Any) -> str:
    """The user's rights, the only thing about the user a body shows (its
    links follow ``perms``). Read from the permission cache ``requires``
    already filled, so it costs no query."""
    rights = sorted(user.get_all_permissions())
    return hashlib.sha256(repr((user.is_superuser, rights)).encode()).hexdigest()[:16]


# What was read, for the worker to render again after the next refresh
# (costapp/pagewarm.py): a Redis sorted set of (path, user, host, scheme)
# scored by the time, the oldest dropped past READS_KEPT.
READS_KEY = "pagewarm:reads"
READS_KEPT = 2000
# Set on a replayed request: a replay is not a read (else a page read once
# would be rendered after every refresh for ever).
REPLAY_ATTRIBUTE = "costapp_page_replay"


def _reads_client() -> Any:
    """The page cache's Redis client, or None without a shared cache (a
    per-process cache cannot hand a worker's body to a web process)."""
    cache = caches["pages"]
    if not isinstance(cache, RedisCache):
        return None
    return cache._cache.get_client(write=True)


def read_record(request: HttpRequest) -> None:
    """Remember that ``request`` read a cached body (one round trip)."""
    client = _reads_client()
    if client is None or getattr(request, REPLAY_ATTRIBUTE, False):
        return
    key = caches["pages"].make_key(READS_KEY)
    member = json.dumps(
        [request.get_full_path(), request.user.pk, request.get_host(),
         request.is_secure()]
    )  # fmt: skip
    pipe = client.pipeline(transaction=False)
    pipe.zadd(key, {member: time.time()})
    pipe.zremrangebyrank(key, 0, -READS_KEPT - 1)
    pipe.execute()


def reads_recent(*, within_s: float) -> list[bytes]:
    """The reads of the last ``within_s`` seconds, the latest first."""
    client = _reads_client()
    if client is None:
        return []
    key = caches["pages"].make_key(READS_KEY)
    found: list[bytes] = client.zrevrangebyscore(
        key, "+inf", time.time() - within_s, start=0, num=READS_KEPT
    )
    return found


def _cache_call(call: Callable[..., Any], *args: Any) -> Any:
    """A cache read or write; an unreachable cache (Redis down) means the
    page is rendered, never that it fails."""
    try:
        return call(*args)
    except Exception as exc:  # noqa: BLE001 - any backend's connection error
        logger.warning("page cache unavailable: %s", exc)
        return None


def body_render(
    request: HttpRequest,
    template: str,
    *,
    page: str,
    key: Iterable[Any],
    context: Callable[[], dict[str, Any]],
) -> SafeString:
    """The page body ``template`` renders from ``context()``, from the cache
    when the data, the query string, the day, the user's rights and the code
    are those it was rendered for. ``context`` is called only on a miss;
    ``key`` holds what the view resolved that the query string alone does not
    say (a default window, for instance)."""
    seconds = settings.PAGE_CACHE_SECONDS
    version = data_version() if seconds > 0 else None
    if version is None:
        return mark_safe(render_to_string(template, context(), request))  # noqa: S308
    parts = (
        code_version(),
        settings.DATABASES["default"]["HOST"],
        settings.DATABASES["default"]["NAME"],
        # What the templates read from settings.
        settings.DISPLAY_TIME_ZONE,
        settings.STATIC_COLLECTED,
        page,
        version,
        display_today().isoformat(),
        rights_of(request.user),
        sorted(request.GET.lists()),
        *key,
    )
    cache_key = "page:" + hashlib.sha256(repr(parts).encode()).hexdigest()
    pages = caches["pages"]
    # For the worker to render it again after the next refresh (pagewarm).
    _cache_call(read_record, request)
    body = _cache_call(pages.get, cache_key)
    if body is None:
        body = render_to_string(template, context(), request)
        _cache_call(pages.set, cache_key, body, seconds)
    # The body is the template's own output, escaped when it was rendered.
    return mark_safe(body)  # noqa: S308
