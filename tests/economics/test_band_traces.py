"""The shaded band is drawn stretch by stretch: one pair of traces over a
series with a gap made plotly fill a wedge across it (a holiday without a
baseline drew a detached triangle on the overview)."""

from __future__ import annotations

from costapp.charts import MAX_BAND_RUNS, band_traces
from costapp.economics.charts import baseline_band

X = [f"2026-11-{d:02d}" for d in range(1, 11)]


def pairs(traces: list[dict]) -> list[tuple[list, list, list]]:
    """(x, low, high) of each (low, high) pair, checking the pairing."""
    out = []
    for low, high in zip(traces[::2], traces[1::2], strict=True):
        assert low["x"] == high["x"]
        assert "fill" not in low and high["fill"] == "tonexty"
        out.append((low["x"], low["y"], high["y"]))
    return out


def test_a_gap_in_either_bound_splits_the_band_and_nothing_spans_it() -> None:
    low = [1, 1, None, 1, 1, 1, 1, 1, None, 1]
    high = [2, 2, 2, 2, None, 2, 2, 2, 2, 2]
    got = pairs(band_traces(X, low, high, name="band", fillcolor="c"))
    # Stretches where both are known: 0-1, 3 (one point: shades nothing), 5-7, 9.
    assert [x for x, _, _ in got] == [X[0:2], X[5:8]]
    assert all(None not in lo and None not in hi for _, lo, hi in got)


def test_the_legend_names_the_band_once() -> None:
    traces = band_traces(
        X, [1, 1, None] * 3 + [1], [2, 2, None] * 3 + [2], name="band", fillcolor="c"
    )
    shown = [t for t in traces if t["showlegend"]]
    assert len(traces) == 6 and len(shown) == 1 and shown[0]["name"] == "band"
    assert {t["legendgroup"] for t in traces} == {"band"}


def test_a_very_gappy_series_keeps_its_longest_stretches() -> None:
    # MAX_BAND_RUNS + 10 stretches of two points, every tenth of three.
    low: list[float | None] = []
    for k in range(MAX_BAND_RUNS + 10):
        low += [1.0] * (3 if k % 10 == 0 else 2) + [None]
    x = list(range(len(low)))
    got = pairs(band_traces(x, low, low, name="b", fillcolor="c"))
    assert len(got) == MAX_BAND_RUNS
    assert sum(len(xs) == 3 for xs, _, _ in got) == 6  # every long one kept
    assert [xs[0] for xs, _, _ in got] == sorted(xs[0] for xs, _, _ in got)


class Row:
    def __init__(self, i: int, known: bool) -> None:
        from datetime import date

        self.period_start = date(2026, 11, i + 1)
        self.flag = ""
        self.cause = ""
        self.cost_per_1k_requests = 2.0
        self.baseline = 2.0 if known else None
        self.lower = 1.5 if known else None
        self.upper = 2.5 if known else None
        self.complete = True


def test_the_overview_band_skips_a_day_without_a_baseline() -> None:
    rows = [Row(i, known=i not in (0, 1, 5)) for i in range(10)]
    fig = baseline_band(rows, title="t")
    bands = [t for t in fig["data"] if t.get("legendgroup") == "band"]
    assert [len(t["x"]) for t in bands] == [3, 3, 4, 4]
    actual = next(t for t in fig["data"] if t["name"] == "actual")
    assert len(actual["x"]) == 10
