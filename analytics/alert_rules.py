"""Alert rule semantics over data periods, pure.

The same two functions run live (``costapp.alerts.evaluation``) and in the
backtest (``costapp.alerts.selectors.alert_rule_backtest``), so what a backtest
says a rule would have done is what the rule does.

- ``breaches`` decides, for each data period, whether the rule's condition
  holds. A period with no value, under the minimum volume, or classed as a
  traffic change (when the rule does not ask for those) is not in breach:
  missing data never fires. ``condition: anomaly`` reads the stored flag:
  above, a cost ``anomaly`` (the band or the sustained detector); below, a
  ``saving`` or ``check`` (a fall, which pages only for a rule that asks).
  A band or ratio rule above is in breach on any day flagged ``anomaly``
  too, so a day the sustained detector holds never resets ``for``.
  ``condition: price`` fires on the one day a known price change is told
  (``analytics.price_events``), above for a rise (a discount's expiry),
  below for a fall; no other condition breaches on it, since the day is
  judged against the rescaled baseline.
- A period that is not closed (still in progress, or its data read before it
  ended) is not judged at all: it never breaches, never resolves and never
  resets ``for``; the state machine passes over it as if it were not there.
- ``transitions`` runs the state machine over the periods in data time, not
  wall-clock evaluations (data arrives late, and an hour that arrives late
  still counts once): ``for_periods`` consecutive breaching periods fire; any
  period not in breach resets pending; firing resolves after
  ``keep_firing_for`` periods not in breach (default: ``for_periods``); while
  firing, a breaching period at least ``repeat`` after the last notification
  repeats it (Alertmanager's repeat_interval).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from analytics.errors import InvalidInput

Condition = Literal["band", "ratio", "threshold", "anomaly", "price"]
Direction = Literal["above", "below"]
Kind = Literal["firing", "repeat", "resolved"]

CONDITIONS: tuple[Condition, ...] = ("band", "ratio", "threshold", "anomaly", "price")
# The stored flags of a fall (analytics.anomalies): never a cost anomaly.
FALL_FLAGS = ("saving", "check")
DIRECTIONS: tuple[Direction, ...] = ("above", "below")
DEFAULT_REPEAT = timedelta(hours=4)


@dataclass(frozen=True)
class RuleSpec:
    condition: Condition
    direction: Direction = "above"
    ratio: float | None = None  # band: unused; ratio: value vs ratio x baseline
    threshold: float | None = None
    for_periods: int = 1
    keep_firing_for: int | None = None
    repeat: timedelta = DEFAULT_REPEAT
    min_volume: float | None = None
    include_traffic: bool = False
    # The stored flag judges this rule's value ($ per 1k requests): a band or
    # ratio rule above then breaches on a day flagged ``anomaly`` too.
    reads_flag: bool = True

    @property
    def keep_periods(self) -> int:
        return self.keep_firing_for if self.keep_firing_for else self.for_periods


@dataclass(frozen=True)
class Period:
    start: datetime
    value: float | None
    baseline: float | None = None
    lower: float | None = None
    upper: float | None = None
    volume: float | None = None
    flag: str = ""
    # False while the period is in progress (or its figure rests on data read
    # before it ended): it is shown, never judged.
    closed: bool = True
    # The LMDI price part of a ``price`` day ($ per 1k requests): its sign is
    # the direction of the known change (None: not known).
    price_part: float | None = None


@dataclass(frozen=True)
class Transition:
    kind: Kind
    at: datetime  # data time: the start of the period that caused it
    value: float | None
    baseline: float | None


@dataclass(frozen=True)
class Outcome:
    transitions: tuple[Transition, ...]
    state: Literal["inactive", "pending", "firing"]
    since: datetime | None  # start of the current firing (or pending) run
    breaching: tuple[bool, ...]


def _missing(x: float | None) -> bool:
    return x is None or x != x  # NaN is missing too


def breach(period: Period, rule: RuleSpec) -> bool:
    if not period.closed or _missing(period.value):
        return False
    if rule.min_volume is not None and (
        _missing(period.volume) or float(period.volume or 0.0) < rule.min_volume
    ):
        return False
    if period.flag == "traffic" and not rule.include_traffic:
        return False
    above = rule.direction == "above"
    if rule.condition == "anomaly":
        # The stored flag: the band or the sustained detector above, a saving
        # or data to check below.
        return period.flag == "anomaly" if above else period.flag in FALL_FLAGS
    if rule.condition == "price":
        # A known price change (analytics.price_events), on its one day: a
        # discount's expiry raising cost is worth one page to finance.
        part = period.price_part
        return period.flag == "price" and (
            _missing(part) or (float(part) > 0 if above else float(part) < 0)  # type: ignore[arg-type]
        )
    if (
        above
        and rule.reads_flag
        and period.flag == "anomaly"
        and rule.condition in ("band", "ratio")
    ):
        # A day the sustained detector holds is in breach even inside the
        # band or under the ratio: a step landing just inside it for a day
        # never resets ``for``.
        return True
    value = float(period.value)  # type: ignore[arg-type]
    if rule.condition == "threshold":
        if rule.threshold is None:
            return False
        return value > rule.threshold if above else value < rule.threshold
    if rule.condition == "band":
        edge = period.upper if above else period.lower
        if _missing(edge):
            return False
        return value > float(edge) if above else value < float(edge)  # type: ignore[arg-type]
    # ratio to baseline: 1.2 means 20 % above (or 1/1.2 of it, below)
    if _missing(period.baseline) or rule.ratio is None or period.baseline == 0:
        return False
    ratio = value / float(period.baseline)  # type: ignore[arg-type]
    return ratio >= rule.ratio if above else ratio <= 1.0 / rule.ratio


def breaches(periods: Sequence[Period], rule: RuleSpec) -> list[bool]:
    return [breach(p, rule) for p in periods]


def transitions(periods: Sequence[Period], rule: RuleSpec) -> Outcome:
    """Periods must be sorted by start, one per data period."""
    flags = breaches(periods, rule)
    out: list[Transition] = []
    state: Literal["inactive", "pending", "firing"] = "inactive"
    pending = 0
    clear = 0
    since: datetime | None = None
    last_sent: datetime | None = None
    for period, hit in zip(periods, flags, strict=True):
        if not period.closed:
            continue
        if state != "firing":
            if hit:
                pending += 1
                if pending == 1:
                    since = period.start
                if pending >= rule.for_periods:
                    state = "firing"
                    clear = 0
                    last_sent = period.start
                    out.append(_at("firing", period))
                else:
                    state = "pending"
            else:
                pending, state, since = 0, "inactive", None
            continue
        if hit:
            clear = 0
            if last_sent is not None and period.start - last_sent >= rule.repeat:
                last_sent = period.start
                out.append(_at("repeat", period))
            continue
        clear += 1
        if clear >= rule.keep_periods:
            out.append(_at("resolved", period))
            state, pending, clear, since = "inactive", 0, 0, None
    return Outcome(
        transitions=tuple(out), state=state, since=since, breaching=tuple(flags)
    )


def _at(kind: Kind, period: Period) -> Transition:
    return Transition(
        kind=kind, at=period.start, value=period.value, baseline=period.baseline
    )


def stale(*, last_data_end: datetime | None, now: datetime, max_age: timedelta) -> bool:
    """A source is stale when its newest data ends longer ago than expected;
    a source that never delivered anything is stale too."""
    return last_data_end is None or now - last_data_end > max_age


def budget_burn(
    days: Sequence[tuple[datetime, float | None]], monthly_amount: float
) -> list[float | None]:
    """Per day, the percentage of the month's budget spent from the 1st to
    that day inclusive. A day with no cost adds nothing but keeps its value
    missing; the total carries on."""
    out: list[float | None] = []
    month: tuple[int, int] | None = None
    total = 0.0
    for start, cost in days:
        if (start.year, start.month) != month:
            month, total = (start.year, start.month), 0.0
        if cost is None or cost != cost:
            out.append(None)
            continue
        total += cost
        out.append(100.0 * total / monthly_amount if monthly_amount > 0 else None)
    return out


# Before the 5th a month-end forecast rests on too few days to page anyone.
BUDGET_FORECAST_FROM_DAY = 5


def budget_forecast_breach(*, forecast: float, budget: float, share: float) -> bool:
    """Whether a month-end ``forecast`` passes ``share`` of ``budget``
    (1.0 = the whole budget)."""
    if budget <= 0:
        raise InvalidInput("budget", budget, "must be positive")
    if not 0 < share:
        raise InvalidInput("share", share, "must be positive")
    return forecast >= share * budget


def burn_day(path: Sequence[Sequence[object]], budget: float) -> str | None:
    """The first ISO day a stored cumulative path (``[[day, spend], ...]``)
    reaches ``budget``; None when it does not this month."""
    for day, spent in path:
        if float(spent) >= budget:  # type: ignore[arg-type]
            return str(day)
    return None
