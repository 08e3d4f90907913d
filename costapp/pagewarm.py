"""The page bodies read most recently, rendered again in the worker after
each refresh, so that the first reader after new data lands is served from
the page cache.

Every write changes the data version in the page cache's key
(``costapp.pagecache``): without this, the first request for each page after
a telemetry refresh (every 15 minutes by default) or a bill pull renders in
full, 12-17x the trivial page. Each request for a cached body records what it
asked for (path and query string, user, host: ``pagecache.read_record``) in a
Redis sorted set scored by the time; the ``pages`` pipeline step, which follows every step that writes,
replays the most recent of the last day through the same views, once per
path and set of rights (a body depends on the user's rights, not on the
user), and the bodies land under the new version before their readers come
back. A replay is an ordinary call of the view, so it renders exactly what
the reader would have, and a body still cached costs one cache read.

Only with a shared (Redis) page cache: a per-process cache could not hand a
worker's body to a web process, and SQLite pages are rendered every time.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import RequestFactory
from django.urls import Resolver404, resolve

from costapp import pagecache

logger = logging.getLogger(__name__)

# Only reads of the last day are replayed: a page nobody opened today is not
# worth a render after every refresh.
READ_WITHIN_S = 86400


@dataclass(frozen=True)
class Warmed:
    replayed: int  # views called (a body still cached costs a cache read)
    failed: int  # replays that raised (logged), or whose path no longer resolves
    seconds: float


def pages_warm(*, limit: int | None = None, budget_s: float | None = None) -> Warmed:
    """Replay the ``limit`` most recent distinct reads of the last day, one
    per path and set of rights, within ``budget_s`` seconds."""
    limit = settings.COSTAPP_PAGE_WARM_MAX if limit is None else limit
    budget_s = settings.COSTAPP_PAGE_WARM_S if budget_s is None else budget_s
    t0 = time.perf_counter()
    raw = pagecache.reads_recent(within_s=READ_WITHIN_S) if limit else []
    users: dict[int, Any] = {}
    done: set[tuple[str, str]] = set()
    replayed = failed = 0
    factory = RequestFactory()
    for member in raw:
        if replayed + failed >= limit or time.perf_counter() - t0 > budget_s:
            break
        path, user_pk, host, secure = json.loads(member)
        if user_pk not in users:
            users[user_pk] = (
                get_user_model().objects.filter(pk=user_pk, is_active=True).first()
            )
        user = users[user_pk]
        if user is None:
            continue
        seen = (path, pagecache.rights_of(user))
        if seen in done:
            continue
        done.add(seen)
        request = factory.get(path, HTTP_HOST=host, secure=secure)
        request.user = user
        setattr(request, pagecache.REPLAY_ATTRIBUTE, True)
        try:
            match = resolve(request.path_info)
            match.func(request, *match.args, **match.kwargs)
            replayed += 1
        except Resolver404:
            failed += 1
        except Exception:  # one page's failure is not the step's
            logger.warning("page warm: %s failed", path, exc_info=True)
            failed += 1
    return Warmed(replayed, failed, time.perf_counter() - t0)
