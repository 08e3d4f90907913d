"""The schema and the docs page for a logged-in reader."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.api.conftest import TokenFor
from tests.api.helpers import api_get
from tests.support.users import user_in

pytestmark = pytest.mark.django_db


def test_the_docs_page_lists_every_operation_from_the_served_schema(
    token_for: TokenFor,
) -> None:
    client = Client()
    client.force_login(user_in("reader", "finance"))
    schema = client.get("/api/schema/").json()
    assert schema == api_get("/api/v1/schema/", token_for("finance")).json()
    paths = sorted(schema["paths"])
    assert len(paths) == 10
    page = client.get("/api/docs/").content.decode()
    for path in paths:
        assert f'data-operation="GET {path}"' in page
    # Bounds are written out where a reader sees them.
    assert "1..1000" in page and "costapp.view_alertrule" in page
    assert "7d | 30d | 90d | mtd | last_month | custom" in page  # overview/'s preset


def test_the_docs_page_lists_each_answers_fields_and_renders_code_spans(
    token_for: TokenFor,
) -> None:
    client = Client()
    client.force_login(user_in("reader", "finance"))
    page = client.get("/api/docs/").content.decode()
    rightsizing = page.split('data-operation="GET /api/v1/rightsizing/"', 1)[1]
    rightsizing = rightsizing.split("</section>", 1)[0]
    assert "Field of each row" in rightsizing
    assert (
        "<code>headroom_cost</code></td><td>decimal string or null</td>" in rightsizing
    )
    assert "<code>recommended</code></td><td>integer or null</td>" in rightsizing
    # No raw Markdown: the schema's `spans` are code, the rest escaped.
    assert "`" not in page.split("<main", 1)[-1].split("</main>", 1)[0]


@pytest.mark.parametrize(
    "text, html",
    [
        ("a `b` c", "a <code>b</code> c"),
        ("`<x>`", "<code>&lt;x&gt;</code>"),
        ("odd ` one", "odd ` one"),
        ("", ""),
    ],
)
def test_inline_code_escapes_and_keeps_an_unmatched_backtick(
    text: str, html: str
) -> None:
    from costapp.templatetags.costapp_format import inline_code

    assert inline_code(text) == html
