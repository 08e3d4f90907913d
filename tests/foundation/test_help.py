"""The help pages: the product's docs as pages, and every help text on a
page that points at them lands on a topic and a section that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from costapp.roles import FINANCE
from costapp.views.help import TOPICS
from tests.support.users import user_in

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
# {% url 'help' 'costs' %}#commitments-... in a template.
HELP_LINK = re.compile(r"""\{% url 'help' '([a-z-]+)' %\}(#[a-z0-9-]+)?""")


@pytest.fixture
def reader(client: Client) -> Client:
    client.force_login(user_in("money", FINANCE))
    return client


def test_every_topic_is_a_file_and_renders_with_its_sections(reader: Client) -> None:
    for name in TOPICS:
        assert (ROOT / "docs" / f"{name}.md").is_file(), name
        html = reader.get(f"/help/{name}/").content.decode()
        assert '<h2 id="' in html or '<h1 id="' in html, name
    index = reader.get("/help/").content.decode()
    assert all(f'href="/help/{name}/"' in index for name in TOPICS)


def test_links_between_topics_open_the_topic_page(reader: Client) -> None:
    html = reader.get("/help/economics/").content.decode()
    assert 'href="/help/' in html
    topics = "|".join(TOPICS)
    assert not re.search(rf'href="(?:\./)?(?:{topics})\.md', html)


def test_every_help_link_on_a_page_points_at_a_topic_and_a_section(
    reader: Client,
) -> None:
    found = []
    for template in (ROOT / "templates").rglob("*.html"):
        for topic, anchor in HELP_LINK.findall(template.read_text()):
            found.append((template.name, topic, anchor))
            assert topic in TOPICS, (template, topic)
            if anchor:
                html = reader.get(f"/help/{topic}/").content.decode()
                assert f'id="{anchor[1:]}"' in html, (template, topic, anchor)
    assert len(found) >= 7, found
    # No help text sends a reader to a path in the repository any more.
    for template in (ROOT / "templates").rglob("*.html"):
        assert not re.search(r"docs/[a-z-]+\.md", template.read_text()), template


def test_an_unknown_topic_is_not_found_and_names_the_topics(reader: Client) -> None:
    response = reader.get("/help/benchmarks/")
    assert response.status_code == 404


def test_the_screenshots_the_docs_show_are_served_and_nothing_else(
    reader: Client,
) -> None:
    html = reader.get("/help/costs/").content.decode()
    assert 'src="/help/screenshots/bills.png"' in html
    response = reader.get("/help/screenshots/bills.png")
    assert response.status_code == 200 and response["Content-Type"] == "image/png"
    for bad in ("../fleet.md", "..%2Ffleet.md", "nothing.png", "fleet.example.yaml"):
        assert reader.get(f"/help/screenshots/{bad}").status_code == 404, bad


def test_the_image_carries_what_the_help_pages_serve() -> None:
    """docker build reads .dockerignore: a doc or screenshot left out of the
    image is a 500 or a broken image on the help pages in compose."""
    from fnmatch import fnmatch

    ignored = [
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    served = [f"docs/{name}.md" for name in TOPICS] + [
        f"docs/screenshots/{p.name}" for p in (ROOT / "docs/screenshots").glob("*.png")
    ]
    for path in served:
        parents = [path, *("/".join(path.split("/")[:i]) for i in (1, 2))]
        assert not any(fnmatch(p, pat) for p in parents for pat in ignored), path
