"""Raw samples of a set of names, read in budget-sized chunks and merged."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analytics.telemetry import HOUR_S
from analytics.telemetry_windows import (
    BudgetTooSmall,
    chunk_length_ms,
    chunks,
    merge_samples,
    pack,
)
from costapp.sources.base import SourceError
from costapp.sources.prometheus.client import PrometheusClient, QueryError
from costapp.sources.prometheus.targets import Options

LabelKey = tuple[tuple[str, str], ...]


def _selector(names: Sequence[str], labels: str) -> str:
    if len(names) == 1:
        name_matcher = f'__name__="{names[0]}"'
    else:
        name_matcher = '__name__=~"' + "|".join(re.escape(n) for n in names) + '"'
    inner = ",".join(p for p in (name_matcher, labels.strip().strip(",")) if p)
    return "{" + inner + "}"


def _label_key(metric: dict[str, str]) -> LabelKey:
    return tuple(sorted(metric.items()))


@dataclass
class RawSeries:
    labels: dict[str, str]
    t: np.ndarray  # seconds
    v: np.ndarray


TOO_MANY = re.compile(r"too many samples|max-samples|exceeded", re.I)


class Reader:
    """Reads raw samples of a set of names, in budget-sized chunks."""

    def __init__(self, client: PrometheusClient, options: Options) -> None:
        self.client = client
        self.options = options
        self.config = client.config

    def plan(
        self, counts: dict[str, int], after_ms: int, until_ms: int
    ) -> list[tuple[list[str], int, int]]:
        """(names, after_ms, until_ms) requests for ``(after, until]``."""
        interval = self.options.scrape_interval_s
        longest = until_ms - after_ms
        # Names are packed so one request still covers at least an hour.
        per_hour = max(1, int(self.config.max_samples / (HOUR_S / interval + 1)))
        out: list[tuple[list[str], int, int]] = []
        for names in pack(counts, per_hour):
            series = sum(counts[n] for n in names)
            try:
                length = chunk_length_ms(
                    series=series,
                    interval_s=interval,
                    # +1: a closed range selector can return one edge sample more.
                    max_points=self.config.max_points - 1,
                    max_samples=self.config.max_samples - series,
                    longest_ms=longest,
                )
            except BudgetTooSmall as exc:
                raise SourceError(
                    f"PROMETHEUS_MAX_SAMPLES={self.config.max_samples} is too small "
                    f"for {', '.join(names)}: {exc}",
                    permanent=True,
                ) from exc
            if self.options.chunk_s:
                length = min(length, int(self.options.chunk_s * 1000))
            for c in chunks(after_ms, until_ms, length):
                out.append((names, c.after_ms, c.until_ms))
        return out

    def fetch_chunk(
        self, names: list[str], labels: str, after_ms: int, until_ms: int
    ) -> list[tuple[LabelKey, np.ndarray, np.ndarray]]:
        promql = f"{_selector(names, labels)}[{until_ms - after_ms}ms]"
        try:
            result = self.client.query_matrix(promql, until_ms)
        except QueryError as exc:
            # Our estimate assumed a scrape interval; a denser target is
            # caught here by Prometheus's own limit: halve and retry.
            span = until_ms - after_ms
            if TOO_MANY.search(str(exc)) and span > 2 * 1000:
                mid = after_ms + span // 2
                return self.fetch_chunk(
                    names, labels, after_ms, mid
                ) + self.fetch_chunk(names, labels, mid, until_ms)
            raise
        out = []
        after_s = after_ms / 1000
        for metric, t, v in result:
            keep = t > after_s  # (a, b]: the left edge belongs to the chunk before
            if keep.all():
                out.append((_label_key(metric), t, v))
            elif keep.any():
                out.append((_label_key(metric), t[keep], v[keep]))
        return out


def merge_chunks(
    results: Sequence[Sequence[tuple[LabelKey, np.ndarray, np.ndarray]]],
) -> list[RawSeries]:
    parts: dict[LabelKey, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for result in results:
        for key, t, v in result:
            parts[key].append((t, v))
    out = []
    for key in sorted(parts):
        t, v = merge_samples(parts[key])
        if t.size:
            out.append(RawSeries(dict(key), t, v))
    return out
