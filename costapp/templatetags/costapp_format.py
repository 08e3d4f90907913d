"""The one number formatter (costapp.formatting) as template filters, for the
few values a page shows as stored."""

from __future__ import annotations

from django import template
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe

from costapp import formatting

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    return formatting.duration(seconds)


@register.filter
def series(row: object) -> str:
    """``{{ f|series }}``: a row's scope and name as people read them."""
    get = row.get if isinstance(row, dict) else lambda k: getattr(row, k, "")  # type: ignore[union-attr]
    return formatting.series_label(str(get("scope")), str(get("name")))


@register.filter
def target(name: str) -> str:
    """``{{ s.name|target }}``: __idle__ and __unallocated__ in words."""
    return formatting.target_label(str(name))


@register.filter
def money(value: object, currency: str = "USD") -> str:
    """An amount with its currency (``{{ x|money:"USD" }}``); a missing figure is formatting.MISSING."""
    return formatting.money(value, currency)  # type: ignore[arg-type]


@register.filter
def inline_code(text: object) -> SafeString:
    """``{{ op.description|inline_code }}``: the schema's `backtick` spans as
    <code>, everything else escaped (help texts are written for docs/api.md)."""
    parts = str(text or "").split("`")
    unmatched = len(parts) % 2 == 0  # an odd number of backticks
    out: list[str] = []
    for i, part in enumerate(parts):
        escaped = conditional_escape(part)
        if i % 2 == 0:
            out.append(escaped)
        elif unmatched and i == len(parts) - 1:
            out.append("`" + escaped)  # the last one, left as written
        else:
            out.append(f"<code>{escaped}</code>")
    return mark_safe("".join(out))  # noqa: S308 (every part escaped above)


@register.filter
def words(code: object) -> str:
    """``{{ d.status|words }}``: a stored code as words (``not_sent`` -> not sent)."""
    return str(code or "").replace("_", " ")
