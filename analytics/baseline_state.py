"""The baselines' configuration and carried state: ``BaselineConfig`` (the
defaults, argued in docs/baselines.md) and ``BaselineState`` (everything a
run carries from one day to the next, to resume from or store). The run
itself is ``analytics.baselines``, which re-exports both."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import pandas as pd

from analytics.errors import InvalidInput

Grain = Literal["day", "hour"]
Slots = Literal["weekday", "hour_of_week", "daytype_hour", "none"]


@dataclass(frozen=True)
class BaselineConfig:
    """Defaults are argued in docs/baselines.md."""

    grain: Grain = "day"
    # Seasonal slots; None picks weekday for days, daytype_hour for hours.
    slots: Slots | None = None
    # Half-life of the slot EWMA, in observations of that slot.
    halflife_obs: float = 2.0
    # Accepted observations a slot needs before its rows may flag (warm-up).
    min_obs: int = 3
    # Band half-width in sigmas of ln(u / baseline), and its floor (relative).
    band_k: float = 2.5
    band_floor: float = 0.06
    # How much the baseline's own uncertainty (1 / the slot's EWMA weight)
    # widens the band beyond that of a settled slot (``band_widening``).
    band_base: float = 1.0
    # Half-life of sigma, in days of rows of the series.
    sigma_halflife_days: float = 28.0
    # Half-life of the traffic level that rescales the four parts, in days.
    level_halflife_days: float = 3.0
    # Unit costs need this many finished requests in the period.
    min_requests: float = 100.0
    # Rows held out (flags, holidays) for this many days become a level shift.
    hold_days: int = 14
    # A fall (a saving, never an anomaly) held this many days in a row is the
    # new level sooner: a price cut is not judged against the old price for
    # two weeks, and a rise after it is judged against the new one.
    hold_down_days: int = 2
    # ... and the slots' weights are multiplied by this on that day.
    fall_damp: float = 0.3
    # The sustained-shift CUSUM (analytics.sustained) on the log-likelihood
    # ratio of a rise by sustained_shift (in ln u) against none: decision
    # interval (0: off) and cap above it, in nats.
    sustained_shift: float = 0.18
    sustained_h: float = 1.75
    sustained_cap: float = 2.5
    # The floor under the sigma it divides by (the band's raw sigma, below the
    # band's floor: the evidence is weighed by the series' own noise), and
    # how much the baseline's own uncertainty (1 / the slot's EWMA weight)
    # widens it.
    sustained_floor: float = 0.03
    sustained_base: float = 1.0
    # A known price change (analytics.price_events) smaller than this, in
    # ln of the price, does nothing: an effective rate that barely moved.
    price_min: float = 0.02
    # ... and one is told (flagged ``price``) from this size on: a clock
    # switch of a few percent is the bill's rounding, not news.
    price_told: float = 0.05
    # ... and the days after it that move the change to their mean price,
    # each day's price residual clipped (in ln) so that an incident in that
    # week moves the baseline little.
    price_settle_days: int = 7
    price_clip: float = 0.1

    def slot_kind(self) -> Slots:
        if self.slots is not None:
            return self.slots
        return "weekday" if self.grain == "day" else "daytype_hour"

    @property
    def periods_per_day(self) -> int:
        return 1 if self.grain == "day" else 24


def band_widening(weight: np.ndarray, cfg: BaselineConfig) -> np.ndarray:
    """The factor on the band's sigma where a slot's baseline rests on fewer
    observations than a settled slot's (EWMA weight ``1 / (1 - a)``): after a
    fall's or a known change's rescale damped its weight, a level shift, or
    in warm-up. The band is then a prediction interval, ``sigma^2 (1 +
    band_base / weight)``, relative to a settled slot's (1 there: the
    settled band keeps ``band_k`` sigmas). Without it the weeks after a
    rescale flagged the baseline's own noise."""
    settled = 1.0 / (1.0 - 0.5 ** (1.0 / cfg.halflife_obs))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (1.0 + cfg.band_base / weight) / (1.0 + cfg.band_base / settled)
    return np.sqrt(np.fmax(ratio, 1.0))


def warmup_days(config: BaselineConfig) -> int:
    """Days of history a new series needs before every slot can flag."""
    kind = config.slot_kind()
    if kind in ("weekday", "hour_of_week"):
        return 7 * config.min_obs
    if kind == "daytype_hour":
        # Weekend slots see 2 rows a week.
        return 7 * math.ceil(config.min_obs / 2)
    return config.min_obs


def slot_of(stamps: pd.Series | pd.DatetimeIndex, kind: Slots) -> np.ndarray:
    """Seasonal slot number of each timestamp (UTC)."""
    idx = pd.DatetimeIndex(stamps)
    weekday = np.asarray(idx.weekday)
    hour = np.asarray(idx.hour)
    if kind == "weekday":
        return weekday
    if kind == "hour_of_week":
        return weekday * 24 + hour
    if kind == "daytype_hour":
        return (weekday >= 5).astype(int) * 24 + hour
    return np.zeros(len(idx), dtype=int)


def n_slots(kind: Slots) -> int:
    return {"weekday": 7, "hour_of_week": 168, "daytype_hour": 48, "none": 1}[kind]


_STATE_SERIES_AXIS = {
    "num": 2, "wgt": 2, "nobs": 1, "shadow": 2, "shadow_w": 2, "shadow_on": 0,
    "run": 0, "lvl_num": 0, "lvl_w": 0, "ss": 1, "sw": 1, "cusum": 0,
    "run_down": 0, "down_sum": 0, "price_n": 0, "price_sum": 0, "price_fix": 0,
}  # fmt: skip


def _fresh_state(S: int, N: int) -> dict[str, np.ndarray]:
    return {
        "num": np.zeros((4, S, N)), "wgt": np.zeros((4, S, N)), "nobs": np.zeros((S, N)),
        "shadow": np.zeros((4, S, N)), "shadow_w": np.zeros((4, S, N)),
        "shadow_on": np.zeros(N, dtype=bool), "run": np.zeros(N),
        "lvl_num": np.zeros(N), "lvl_w": np.zeros(N),
        "ss": np.zeros((4, N)), "sw": np.zeros((4, N)), "cusum": np.zeros(N),
        "run_down": np.zeros(N), "down_sum": np.zeros(N), "price_n": np.zeros(N),
        "price_sum": np.zeros(N), "price_fix": np.zeros(N),
    }  # fmt: skip


@dataclass(frozen=True)
class BaselineState:
    """Everything the baselines carry from one day to the next, for a set of
    series: resume from it and the result equals a run over the whole history.

    ``day`` is the first day the state has *not* seen. ``series`` are the key
    tuples in array order. ``to_bytes``/``from_bytes`` give a blob a caller
    can store (numpy's npz format; no pickling of objects).
    """

    config: BaselineConfig
    keys: tuple[str, ...]
    series: tuple[tuple[object, ...], ...]
    day: pd.Timestamp
    arrays: dict[str, np.ndarray]

    def select(self, series: Sequence[tuple[object, ...]]) -> BaselineState:
        """The state of some of the series (unknown ones start fresh)."""
        return BaselineState(
            self.config, self.keys, tuple(series), self.day,
            _state_for(self, list(series)),
        )  # fmt: skip

    def merge(self, other: BaselineState) -> BaselineState:
        """This state with ``other``'s series replaced or added (both at the
        same day and configuration): how an incremental recompute updates a
        saved state for the series it recomputed."""
        if other.config != self.config or other.day != self.day:
            raise InvalidInput("other", other.day, "state of another day or config")
        theirs = set(other.series)
        series = [k for k in self.series if k not in theirs] + list(other.series)
        mine = _state_for(self, series)
        from_other = _state_for(other, series)
        take = np.array([k in theirs for k in series], dtype=bool)
        arrays = {}
        for name, axis in _STATE_SERIES_AXIS.items():
            shape = [1] * mine[name].ndim
            shape[axis] = len(series)
            arrays[name] = np.where(take.reshape(shape), from_other[name], mine[name])
        return BaselineState(self.config, self.keys, tuple(series), self.day, arrays)

    def to_bytes(self) -> bytes:
        meta = {
            "config": asdict(self.config), "keys": list(self.keys),
            "series": [list(map(str, k)) for k in self.series],
            "day": self.day.isoformat(),
        }  # fmt: skip
        buf = io.BytesIO()
        blobs: dict[str, np.ndarray] = {
            "_meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
            **self.arrays,
        }
        np.savez(buf, allow_pickle=False, **blobs)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, blob: bytes) -> BaselineState:
        """Inverse of ``to_bytes``; series key values come back as strings."""
        with np.load(io.BytesIO(blob), allow_pickle=False) as data:
            meta = json.loads(bytes(data["_meta"]).decode())
            arrays = {k: data[k] for k in data.files if k != "_meta"}
        return cls(
            BaselineConfig(**meta["config"]), tuple(meta["keys"]),
            tuple(tuple(k) for k in meta["series"]), pd.Timestamp(meta["day"]), arrays,
        )  # fmt: skip


def _state_for(
    state: BaselineState, series: Sequence[tuple[object, ...]]
) -> dict[str, np.ndarray]:
    """``state``'s arrays re-ordered to ``series``; fresh where unknown."""
    S = n_slots(state.config.slot_kind())
    fresh = _fresh_state(S, len(series))
    where = {k: i for i, k in enumerate(state.series)}
    pos = np.array([where.get(k, -1) for k in series], dtype=np.int64)
    known = pos >= 0
    for name, axis in _STATE_SERIES_AXIS.items():
        # A state saved before the sustained detector (or known price
        # changes) existed has no sums: they start at zero, as when fresh.
        if known.any() and name in state.arrays:
            taken = np.take(state.arrays[name], pos[known], axis=axis)
            index = [slice(None)] * fresh[name].ndim
            index[axis] = np.flatnonzero(known)  # type: ignore[call-overload]
            fresh[name][tuple(index)] = taken
    return fresh
