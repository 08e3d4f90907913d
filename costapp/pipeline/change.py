"""What changed: the part of the data a step must redo, and how requests merge.

A change is a time range and a set of deployments: ``since`` (None: from the
first stored period), ``until`` (None: to the last) and ``series`` (None:
every deployment). Two changes merge into the smallest change that holds
both: the earlier start, the later end, the union of the series. The merge
may cover more than either (two disjoint windows become one that spans
them); every step is idempotent, so doing more is only slower, never wrong.

Stored as JSON on ``PipelineStep.pending`` and ``inflight``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Change:
    since: datetime | None = None
    until: datetime | None = None
    series: frozenset[str] | None = None

    @classmethod
    def of(
        cls,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        series: Iterable[str] | None = None,
    ) -> Change:
        return cls(since, until, None if series is None else frozenset(series))

    def merge(self, other: Change | None) -> Change:
        if other is None:
            return self
        return Change(
            since=_least(self.since, other.since),
            until=_greatest(self.until, other.until),
            series=None
            if self.series is None or other.series is None
            else self.series | other.series,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "series": None if self.series is None else sorted(self.series),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Change | None:
        if data is None:
            return None
        return cls.of(
            since=_when(data.get("since")),
            until=_when(data.get("until")),
            series=data.get("series"),
        )

    def describe(self) -> str:
        names = (
            "every deployment"
            if self.series is None
            else f"{len(self.series)} deployment(s)"
        )
        start = f"{self.since:%Y-%m-%d %H:%M}" if self.since else "the first period"
        end = f"{self.until:%Y-%m-%d %H:%M}" if self.until else "the last"
        return f"{names}, {start} .. {end} UTC"


def merged(changes: Iterable[Change | None]) -> Change | None:
    out: Change | None = None
    for change in changes:
        if change is not None:
            out = change if out is None else out.merge(change)
    return out


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _least(a: datetime | None, b: datetime | None) -> datetime | None:
    # None is "from the first period": it wins.
    return None if a is None or b is None else min(a, b)


def _greatest(a: datetime | None, b: datetime | None) -> datetime | None:
    return None if a is None or b is None else max(a, b)
