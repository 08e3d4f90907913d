"""Absurd values in the query parameters of every page: never a 500.

Each page is first asked with every parameter set to each value at once,
noting which parameters its code reads by name (``query_reads``); then each
parameter it reads gets each value alone. A parameter no code reads cannot
change the answer but through the raw query string, which the combined
requests carry already.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.http import QueryDict
from django.test import Client

from costapp.models import IngestRun
from tests.support.crawl import concrete, url_patterns
from tests.support.fuzz import SKIP_PREFIXES, VALUES, fuzz_world
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.long]

PARAMS = ["start", "end", "basis", "days", "layouts", "page", "sort", "grain"]
ALL = "*"
BY_NAME = ("__getitem__", "get", "getlist", "__contains__")
WHOLE = ("items", "lists", "dict", "copy", "urlencode", "__iter__", "keys", "values")


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    return fuzz_world(monkeypatch)


@contextmanager
def query_reads() -> Iterator[set[str]]:
    """The parameter names any request's QueryDict (immutable once parsed)
    is asked for inside the block, or ``ALL`` once anything walks a whole one
    (a form bound to the query, the page cache's key); a view's mutable copy
    is the walk of a ``copy()``."""
    reads: set[str] = set()
    patch = pytest.MonkeyPatch()

    def by_name(original: Any) -> Any:
        def read(self: QueryDict, key: str, *args: Any, **kwargs: Any) -> Any:
            if not self._mutable:  # built: a parse asks for every key
                reads.add(key)
            return original(self, key, *args, **kwargs)

        return read

    def whole(original: Any) -> Any:
        def read(self: QueryDict, *args: Any, **kwargs: Any) -> Any:
            if not self._mutable:
                reads.add(ALL)
            return original(self, *args, **kwargs)

        return read

    for name in BY_NAME:
        patch.setattr(QueryDict, name, by_name(getattr(QueryDict, name)))
    for name in WHOLE:
        patch.setattr(QueryDict, name, whole(getattr(QueryDict, name)))
    try:
        yield reads
    finally:
        patch.undo()


def test_query_parameters_of_every_page_refuse_absurd_values(
    world: dict[str, str],
) -> None:
    # A server error is a finding to list, not an exception to stop at.
    client = Client(raise_request_exception=False)
    client.force_login(user_in("fuzzer", "admin"))
    problems = []
    spared = 0
    for name, route in url_patterns():
        if name.startswith("admin:"):
            continue
        path = concrete(route, world)
        if path.startswith(SKIP_PREFIXES):
            continue
        with query_reads() as reads:
            for value in VALUES:
                response = client.get(path, dict.fromkeys(PARAMS, value))
                if response.status_code >= 500:
                    problems.append(f"GET {path}?(all)={value[:30]!r}: 500")
        read = PARAMS if ALL in reads else [p for p in PARAMS if p in reads]
        spared += len(PARAMS) - len(read)
        for param in read:
            for value in VALUES:
                response = client.get(path, {param: value})
                if response.status_code >= 500:
                    problems.append(f"GET {path}?{param}={value[:30]!r}: 500")
    assert not problems, "\n".join(problems[:60])
    assert not IngestRun.objects.filter(status=IngestRun.RUNNING).exists()
    # The reads are noticed: most pages read their filters, some read none.
    assert 0 < spared < len(PARAMS) * len(list(url_patterns()))


def test_query_reads_notices_a_read_by_name_and_a_walk(rf: Any) -> None:
    request = rf.get("/", {"days": "7", "sort": "x"})
    with query_reads() as reads:
        request.GET.get("days")
    assert reads == {"days"}
    with query_reads() as reads:
        dict(request.GET.lists())
    assert reads == {ALL}
    request.GET.get("sort")  # outside the block: not noticed, not patched
