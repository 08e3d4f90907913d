"""The product's documentation as pages. Help texts on the pages link to a
topic's section here (``{% url 'help' 'costs' %}#commitments``) rather than
to a path in a repository the reader may not have. The topics are the
Markdown files in docs/ a user reads; how the product was measured and built
(benchmarks) stays in the repository."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import markdown
from django.conf import settings
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from costapp.access import requires

TOPICS = {
    "economics": "Unit economics: the pages and what follows new data",
    "unit-costs": "Unit costs, idle and headroom",
    "baselines": "Baselines, flags and explanations",
    "costs": "Bills, allocation, commitments and exports",
    "telemetry": "Telemetry: engines, exporters and their series",
    "fleet": "The fleet file",
    "alerts": "Alerts, channels and on-call",
    "capacity": "The capacity model",
    "capacity-ui": "The capacity pages",
    "capacity-validation": "How the capacity model was validated",
    "api": "The JSON API",
    "security": "Roles, rights and security",
    "saved-views": "Saved views",
}
# A link to another served topic (``costs.md#commitments``) becomes a link to
# its page; anything else (a path in the repository) is left as written.
DOC_LINK = re.compile(r'href="(?:\./)?([a-z-]+)\.md(#[^"]*)?"')


def _docs() -> Path:
    return Path(settings.BASE_DIR) / "docs"


@cache
def _rendered(name: str, mtime_ns: int) -> SafeString:
    """A topic's HTML, its headings with ids (the sections links point at);
    per process and file version. The files are the project's own."""
    text = (_docs() / f"{name}.md").read_text(encoding="utf-8")
    html = markdown.markdown(
        text, extensions=["tables", "fenced_code", "toc", "sane_lists"]
    )

    def linked(match: re.Match[str]) -> str:
        topic, anchor = match.group(1), match.group(2) or ""
        if topic not in TOPICS:
            return match.group(0)
        return f'href="{reverse("help", args=[topic])}{anchor}"'

    html = DOC_LINK.sub(linked, html)
    # The docs' screenshots sit beside them (docs/screenshots/).
    html = html.replace(
        'src="screenshots/', f'src="{reverse("help_index")}screenshots/'
    )
    return mark_safe(html)  # noqa: S308 - our own docs


@requires("costapp.view_overview")
def index(request: HttpRequest) -> HttpResponse:
    return render(request, "help/index.html", {"topics": TOPICS})


@requires("costapp.view_overview")
def topic(request: HttpRequest, topic: str) -> HttpResponse:
    if topic not in TOPICS:
        raise Http404(f"no help topic {topic!r}; topics: {', '.join(TOPICS)}")
    path = _docs() / f"{topic}.md"
    return render(
        request,
        "help/topic.html",
        {
            "name": topic,
            "title": TOPICS[topic],
            "body": _rendered(topic, path.stat().st_mtime_ns),
            "topics": TOPICS,
        },
    )


@requires("costapp.view_overview")
def screenshot(request: HttpRequest, file: str) -> FileResponse:
    """One of the docs' screenshots: a name from the folder's own listing,
    never a path built from the request."""
    shots = {p.name: p for p in (_docs() / "screenshots").glob("*.png")}
    if file not in shots:
        raise Http404(f"no screenshot {file!r}")
    return FileResponse(shots[file].open("rb"), content_type="image/png")
