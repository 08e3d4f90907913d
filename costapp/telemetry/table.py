"""The telemetry page's table rows as HTML, formatted in Python.

The template formatted its 90 rows x 20 cells with ``floatformat``, a third of
the 90-day page's Python time; ``number`` gives the filter's very text
(``tests/telemetry/test_table.py`` checks it against the filter) at a fraction
of the cost.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Context, Decimal

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

MISSING = "—"


def number(value: float | None, places: int, *, grouped: bool = False) -> str:
    """``value|floatformat:places`` (``"<places>g"`` when ``grouped``) for a
    float or None (``""``, as the filter gives)."""
    if value is None:
        return ""
    d = Decimal(str(value))
    if not d.is_finite():
        return str(value)
    _, digits, exponent = d.as_tuple()
    if len(digits) + abs(int(exponent)) > 200:
        return str(value)  # the filter's cut-off: written as is
    rounded = d.quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP, Context(prec=400))
    if not rounded:
        rounded = abs(rounded)  # the filter never writes "-0"
    return format(rounded, f"{',' if grouped else ''}.{places}f")


def _or_missing(text: str) -> str:
    return text or MISSING


def row_html(h: dict[str, object]) -> SafeString:
    """The cells after the first (the bucket start, written by the template)."""
    if not h["hours"]:
        return mark_safe(
            '<td class="num">0</td><td colspan="19" class="muted">no telemetry</td>'
        )

    def n(key: str, places: int, grouped: bool = False) -> str:
        return number(h[key], places, grouped=grouped)  # type: ignore[arg-type]

    if h["gpu_unknown"]:
        gpu = (
            '<span class="badge warn" title="GPU-hours unknown for '
            f'{escape(h["gpu_unknown"])} hours">unknown</span>'
        )
    else:
        gpu = n("gpu_seconds", 0, True)
    cells = [
        escape(h["hours"]),
        n("requests", 0, True),
        n("requests_stop", 0, True),
        n("requests_length", 0, True),
        n("requests_aborted", 0, True),
        n("prompt_tokens", 0, True),
        n("generation_tokens", 0, True),
        n("replicas_mean", 2),
        n("replicas_max", 0, True),
        gpu,
        _or_missing(n("kv_cache_usage_mean", 3)),
        _or_missing(n("kv_cache_usage_max", 3)),
        f"{_or_missing(n('running_mean', 1))} / "
        f"{_or_missing(n('running_max', 0, True))}",
        f"{_or_missing(n('waiting_mean', 1))} / "
        f"{_or_missing(n('waiting_max', 0, True))}",
        _or_missing(n("preemptions", 0, True)),
        _or_missing(n("prefix_hit_rate", 3)),
        _or_missing(n("ttft_p95", 3)),
        _or_missing(n("itl_p95", 4)),
        _or_missing(n("e2e_p95", 3)),
    ]
    counts = (
        '<span class="badge warn">extrapolated</span>' if h["extrapolated"] else "exact"
    )
    html = "".join(f'<td class="num">{c}</td>' for c in cells)
    return mark_safe(f"{html}<td>{counts}</td>")  # noqa: S308  # escaped above
