"""Absurd values in the query parameters of every page: never a 500.

Each page is first asked with every parameter set to each value at once,
noting which parameters its code reads by name (``query_reads``), on the
request's query or a copy of it; then each parameter it reads gets each value
alone. A parameter no code reads by name cannot change the answer but through
a walk of the whole query (a page cache key, a form bound to a copy, links
that carry the query on), which the combined requests exercise already with
every parameter at every value.
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
BY_NAME = ("__getitem__", "get", "getlist", "__contains__")
# Marks a mutable copy of a request's query, whose reads by name count too.
COPIED = "_fuzz_copied"


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    return fuzz_world(monkeypatch)


@contextmanager
def query_reads() -> Iterator[set[str]]:
    """The parameter names a request's QueryDict (immutable once parsed), or
    a copy of one, is asked for by name inside the block. A QueryDict being
    built asks for every key it parses, so mutable ones that are not copies
    are not watched."""
    reads: set[str] = set()
    patch = pytest.MonkeyPatch()

    def by_name(original: Any) -> Any:
        def read(self: QueryDict, key: str, *args: Any, **kwargs: Any) -> Any:
            if not self._mutable or getattr(self, COPIED, False):
                reads.add(key)
            return original(self, key, *args, **kwargs)

        return read

    original_copy = QueryDict.copy

    def copy(self: QueryDict) -> QueryDict:
        copied = original_copy(self)
        setattr(copied, COPIED, True)
        return copied

    for name in BY_NAME:
        patch.setattr(QueryDict, name, by_name(getattr(QueryDict, name)))
    patch.setattr(QueryDict, "copy", copy)
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
        read = [p for p in PARAMS if p in reads]
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


def test_query_reads_notices_reads_by_name_on_the_query_and_its_copies(
    rf: Any,
) -> None:
    request = rf.get("/", {"days": "7", "sort": "x", "grain": "day"})
    with query_reads() as reads:
        request.GET.get("days")
        copied = request.GET.copy()
        copied.setlist("page", ["2"])  # a view's own write is no read
        assert "sort" in copied
        dict(request.GET.lists())  # a walk reads no name
    assert reads == {"days", "sort"}
    request.GET.get("grain")  # outside the block: not noticed, not patched
    assert reads == {"days", "sort"}
