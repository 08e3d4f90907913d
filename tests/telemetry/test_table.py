"""The telemetry table's cells, formatted in Python, are the text the
template's ``floatformat`` filters gave; the figures' script tag is
``json_script``'s."""

from __future__ import annotations

import math

from django.template import Context, Template
from django.template.defaultfilters import floatformat
from django.utils.html import json_script as django_json_script
from hypothesis import given, settings
from hypothesis import strategies as st

from costapp.telemetry import charts
from costapp.telemetry.table import number, row_html

# The cells as the template wrote them before ``row_html``.
TEMPLATE = """{% if not h.hours %}<td class="num">0</td><td colspan="19" class="muted">no telemetry</td>{% else %}<td class="num">{{ h.hours }}</td><td class="num">{{ h.requests|floatformat:"0g" }}</td><td class="num">{{ h.requests_stop|floatformat:"0g" }}</td><td class="num">{{ h.requests_length|floatformat:"0g" }}</td><td class="num">{{ h.requests_aborted|floatformat:"0g" }}</td><td class="num">{{ h.prompt_tokens|floatformat:"0g" }}</td><td class="num">{{ h.generation_tokens|floatformat:"0g" }}</td><td class="num">{{ h.replicas_mean|floatformat:2 }}</td><td class="num">{{ h.replicas_max|floatformat:"0g" }}</td><td class="num">{% if h.gpu_unknown %}<span class="badge warn" title="GPU-hours unknown for {{ h.gpu_unknown }} hours">unknown</span>{% else %}{{ h.gpu_seconds|floatformat:"0g" }}{% endif %}</td><td class="num">{{ h.kv_cache_usage_mean|floatformat:3|default:"—" }}</td><td class="num">{{ h.kv_cache_usage_max|floatformat:3|default:"—" }}</td><td class="num">{{ h.running_mean|floatformat:1|default:"—" }} / {{ h.running_max|floatformat:"0g"|default:"—" }}</td><td class="num">{{ h.waiting_mean|floatformat:1|default:"—" }} / {{ h.waiting_max|floatformat:"0g"|default:"—" }}</td><td class="num">{{ h.preemptions|floatformat:"0g"|default:"—" }}</td><td class="num">{{ h.prefix_hit_rate|floatformat:3|default:"—" }}</td><td class="num">{{ h.ttft_p95|floatformat:3|default:"—" }}</td><td class="num">{{ h.itl_p95|floatformat:4|default:"—" }}</td><td class="num">{{ h.e2e_p95|floatformat:3|default:"—" }}</td><td>{% if h.extrapolated %}<span class="badge warn">extrapolated</span>{% else %}exact{% endif %}</td>{% endif %}"""

FLOATS = st.one_of(
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
    st.sampled_from([0.0, -0.0, 0.5, 1.5, 2.5, 2.675, 1.0005, -0.0004, 1234567.5]),
)
KEYS = (
    "requests", "requests_stop", "requests_length", "requests_aborted",
    "prompt_tokens", "generation_tokens", "replicas_mean", "replicas_max",
    "gpu_seconds", "kv_cache_usage_mean", "kv_cache_usage_max", "running_mean",
    "running_max", "waiting_mean", "waiting_max", "preemptions", "prefix_hit_rate",
    "ttft_p95", "itl_p95", "e2e_p95",
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(value=FLOATS, places=st.sampled_from([0, 1, 2, 3, 4]), grouped=st.booleans())
def test_number_is_the_floatformat_filters_text(
    value: float | None, places: int, grouped: bool
) -> None:
    arg = f"{places}g" if grouped else places
    assert number(value, places, grouped=grouped) == floatformat(value, arg)


@settings(max_examples=150, deadline=None)
@given(
    values=st.fixed_dictionaries({k: FLOATS for k in KEYS}),
    hours=st.integers(0, 24),
    gpu_unknown=st.integers(0, 3),
    extrapolated=st.booleans(),
)
def test_a_row_is_the_html_the_template_wrote(
    values: dict[str, float | None], hours: int, gpu_unknown: int, extrapolated: bool
) -> None:
    row: dict[str, object] = {
        **values,
        "hours": hours,
        "gpu_unknown": gpu_unknown,
        "extrapolated": extrapolated,
    }
    expected = Template(TEMPLATE).render(Context({"h": row}))
    assert str(row_html(row)) == expected


def test_a_nan_is_written_as_the_filter_writes_it() -> None:
    assert number(math.nan, 2) == floatformat(math.nan, 2)


@settings(max_examples=200, deadline=None)
@given(
    value=st.recursive(
        st.one_of(
            st.none(),
            st.booleans(),
            st.floats(allow_nan=False),
            st.text(),
            st.integers(),
        ),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=20,
    ),
    element_id=st.sampled_from(["telemetry-figures", 'a"<b>&']),
)
def test_the_figures_script_is_djangos_json_script(
    value: object, element_id: str
) -> None:
    assert str(charts.json_script(value, element_id)) == str(
        django_json_script(value, element_id)
    )
