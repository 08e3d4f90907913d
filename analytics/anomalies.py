"""Detection glued end to end: unit costs -> baselines -> LMDI -> explanation.

``detect(frame)`` is what costapp stores and what the benchmark scores;
``python -m analytics.anomalies`` runs the same function on a CSV (stdin to
stdout, the only I/O in ``analytics/``, at the edge)::

    python -m analytics.anomalies < history.csv > flags.csv

Input columns: ``series,day,cost,requests`` and optionally ``tokens``,
``gpu_hours``, ``holiday`` (1/true/yes), ``final`` (1/true/yes: the day's
bill is final; without the column every day is). Output columns:
``series,day,cost_per_1k,baseline,lower,upper,flag,cause`` then
``price,fleet,traffic,size,level_shift,note``. ``flag`` is ``anomaly`` (a cost
anomaly, always a rise: price or fleet), ``saving`` (the same, a fall, on a
final bill), ``check`` (a fall on a bill not final: a missing bill line or
requests counted twice look the same), ``traffic``, ``size`` or empty;
``cause`` is the sentence. Without ``gpu_hours`` the cause can only be cost vs traffic (and
without ``tokens`` there is no size): ``note`` says so on every row, and so
does a line on stderr.

Exit codes: 0 ok, 2 invalid input (the message names the field and value).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

import numpy as np
import pandas as pd

from analytics.baselines import BaselineConfig, BaselineState, baselines_run
from analytics.errors import InvalidInput
from analytics.explain import explain
from analytics.price_events import (
    PRICE,
    change_sentence,
    known_rows,
    lump_sentence,
    old_price,
    text_column,
)

FLAG_OF_CAUSE = {"cost": "anomaly", "traffic": "traffic", "size": "size"}
# A cost move down is never an anomaly: a saving where the days' bill is
# final, data to check where it is not (a missing bill line or requests
# scraped twice look the same as a price cut).
SAVING, CHECK = "saving", "check"
OUTPUT_COLUMNS = (
    "series", "day", "cost_per_1k", "baseline", "lower", "upper", "flag", "cause",
    "price", "fleet", "traffic", "size", "level_shift", "note",
)  # fmt: skip
EXIT_OK, EXIT_INVALID = 0, 2
NOTE_NO_GPU = "no gpu_hours: the cause is cost vs traffic only"
NOTE_NO_TOKENS = "no tokens: no size part"
# A series' latest period held by the sustained detector alone: the period
# after it confirms or withdraws the flag (analytics.sustained.settled_runs).
PENDING = (
    " (pending: a small rise held alone, which the next period confirms or withdraws)"
)


BASE_PARTS = ("cost_b", "gpu_hours_b", "tokens_b", "requests_b")
TOKEN_BAND = ("baseline_per_1m_tokens", "lower_per_1m_tokens", "upper_per_1m_tokens")


def replicas_baseline(frame: pd.DataFrame) -> np.ndarray:
    """The replicas the baseline's GPU-hours imply at the period's GPU-hours
    per replica: ``replicas x gpu_hours_b / gpu_hours``. Exact for one
    deployment of fixed GPUs per replica (GPU-hours are replica-hours times
    that); for a team or the fleet it weighs members by their GPU-hours.
    NaN where GPU-hours or replicas are missing."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rep = pd.to_numeric(frame["replicas"], errors="coerce").to_numpy(float)
        g = pd.to_numeric(frame["gpu_hours"], errors="coerce").to_numpy(float)
        gb = pd.to_numeric(frame["gpu_hours_b"], errors="coerce").to_numpy(float)
        out = rep * gb / g
    return np.where(np.isfinite(out) & (g > 0), out, np.nan)


def detect(
    frame: pd.DataFrame,
    *,
    keys: Sequence[str] = ("series",),
    time: str = "day",
    config: BaselineConfig | None = None,
    sentences: bool = True,
    initial: BaselineState | None = None,
) -> pd.DataFrame:
    """Baselines, flags and explanations (``detect_run`` without its states)."""
    return detect_run(
        frame, keys=keys, time=time, config=config, sentences=sentences,
        initial=initial,
    )[0]  # fmt: skip


def detect_run(
    frame: pd.DataFrame,
    *,
    keys: Sequence[str] = ("series",),
    time: str = "day",
    config: BaselineConfig | None = None,
    sentences: bool = True,
    initial: BaselineState | None = None,
    checkpoints: Sequence[pd.Timestamp | str] = (),
) -> tuple[pd.DataFrame, dict[pd.Timestamp, BaselineState]]:
    """Baselines, flags and explanations for every row of every series.

    ``frame``: the columns of ``baselines_compute`` (with ``time`` naming the
    period column). Returns a frame on the same index with the input's key
    and time columns, ``cost_per_1k`` (u), ``baseline``, ``lower``, ``upper``,
    ``flag`` (``anomaly`` / ``saving`` / ``check`` / ``traffic`` / ``size`` /
    ""; a ``final`` column says which days' bill is final), ``cause`` (the
    sentence), the LMDI parts, ``level_shift``, ``held``, ``warm``, the
    baseline parts ``cost_b, gpu_hours_b, tokens_b, requests_b``, the band of
    $ per 1M tokens (``baseline_per_1m_tokens``, ``lower_per_1m_tokens``,
    ``upper_per_1m_tokens``) and ``note``.
    With a ``replicas`` column (mean replicas in the period) a cost sentence
    names the replicas against those the baseline implies
    (``replicas_baseline``); with ``holiday`` a traffic move on a holiday is
    a "holiday dip" (``analytics.explain``). ``initial`` resumes from a
    saved ``BaselineState`` (see ``analytics.baselines.baselines_run``): the
    incremental recompute. Also returns the states at the start of each of
    ``checkpoints`` (UTC days within the frame's days).
    """
    cfg = config or BaselineConfig()
    keys = list(keys)
    run = baselines_run(
        frame, keys=keys, time=time, config=cfg, initial=initial,
        checkpoints=checkpoints,
    )  # fmt: skip
    base = run.figures
    flagged = base["flag"].to_numpy()
    # Only flagged rows are explained: the parts of an unflagged row are
    # never shown, and LMDI of every hour would cost more than the baseline.
    inputs = [
        c
        for c in ("cost", "gpu_hours", "tokens", "requests", "holiday", "replicas")
        if c in frame
    ]
    needed = ["cost_b", "gpu_hours_b", "tokens_b", "requests_b", "flag", "sigma_price",
              "sigma_fleet", "sigma"]  # fmt: skip
    # Column by column with one index array: a boolean .loc over a million
    # rows and a concat cost more than the LMDI of the flagged ones.
    at = np.flatnonzero(flagged)
    rows = pd.DataFrame(
        {
            **{c: frame[c].to_numpy()[at] for c in inputs},
            **{c: base[c].to_numpy()[at] for c in needed},
        },
        index=frame.index[at],
    )
    if "replicas" in rows and "gpu_hours" in rows:
        rows["replicas_b"] = replicas_baseline(rows)
    parts = explain(rows, band_k=cfg.band_k, sentences=sentences)
    n = len(frame)
    columns: dict[str, object] = {k: frame[k].to_numpy() for k in (*keys, time)}
    columns["cost_per_1k"] = base["u"].to_numpy()
    for name in ("baseline", "lower", "upper", *TOKEN_BAND):
        columns[name] = base[name].to_numpy()
    flag = np.full(n, "", dtype=object)
    flag[flagged] = _directed(
        parts["cause"].to_numpy(object),
        base["u"].to_numpy(float)[at] < base["baseline"].to_numpy(float)[at],
        _final(frame)[at],
    )
    cause = np.full(n, "", dtype=object)
    cause[flagged] = parts["sentence"].to_numpy()
    if sentences:
        pending = base["pending"].to_numpy() & (flag == "anomaly")
        cause[pending] = cause[pending] + PENDING
    values = {
        name: np.full(n, np.nan)
        for name in ("price", "fleet", "traffic", "size", "cost")
    }
    for name, v in values.items():
        v[flagged] = parts[name].to_numpy(float)
    _tell_known_prices(
        frame, base, keys, time, rows.columns, (flag, cause, values), cfg, sentences
    )
    columns["flag"] = flag
    columns["cause"] = cause
    columns.update(values)
    for name in ("level_shift", "held", "warm", *BASE_PARTS):
        columns[name] = base[name].to_numpy()
    notes = []
    if "gpu_hours" not in frame.columns or frame["gpu_hours"].isna().all():
        notes.append(NOTE_NO_GPU)
    if "tokens" not in frame.columns or frame["tokens"].isna().all():
        notes.append(NOTE_NO_TOKENS)
    columns["note"] = np.full(n, "; ".join(notes), dtype=object)
    out = pd.DataFrame(columns, index=frame.index, copy=False)
    return out, run.checkpoints


def _tell_known_prices(
    frame: pd.DataFrame, base: pd.DataFrame, keys: list[str], time: str,
    needed: pd.Index, out: tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]],
    cfg: BaselineConfig, sentences: bool,
) -> None:  # fmt: skip
    """Flag and explain the known price days (``analytics.price_events``) in
    ``out`` (flag, cause, parts), in place: the day a known change moved the
    baseline is ``price``, explained against the price before it; a flagged
    lump day that moved the lump's way is ``price`` with the line named; a
    flag beside a known change says the change is in its baseline already."""
    flag, cause, values = out
    flagged = base["flag"].to_numpy(bool)
    change, lump = known_rows(
        frame, base, keys, time, flagged, min_change=cfg.price_told
    )
    said = text_column(frame, "price_change")
    at = np.flatnonzero(change)
    if len(at):
        rows = pd.DataFrame(
            {c: (frame[c] if c in frame else base[c]).to_numpy()[at] for c in needed
             if c in frame or c in base},
            index=frame.index[at],
        )  # fmt: skip
        ratio = base["price_ratio"].to_numpy(float)[at]
        parts = explain(old_price(rows, ratio), band_k=cfg.band_k, sentences=False)
        before = base["baseline"].to_numpy(float)[at] / ratio
        u = base["u"].to_numpy(float)[at]
        flag[at] = PRICE
        cause[at] = [
            change_sentence(c, b, x) if sentences else ""
            for c, b, x in zip(said[at], before, u, strict=True)
        ]
        for name, v in values.items():
            v[at] = parts[name].to_numpy(float)
    beside = flagged & np.isfinite(base["price_ratio"].to_numpy(float))
    for i in np.flatnonzero(beside & (said != "")):
        cause[i] = (
            f"{cause[i]} (a known price change the same day, {said[i]}, is in the baseline)"
        )
    lumps = text_column(frame, "price_lump")
    for i in np.flatnonzero(lump):
        flag[i] = PRICE
        cause[i] = lump_sentence(lumps[i], cause[i])


def _final(frame: pd.DataFrame) -> np.ndarray:
    """Per row, whether its bill is final (``final`` column; absent: final,
    as for a CSV of billed days)."""
    if "final" not in frame.columns:
        return np.ones(len(frame), dtype=bool)
    return frame["final"].fillna(False).astype(bool).to_numpy()


def _directed(causes: np.ndarray, fell: np.ndarray, final: np.ndarray) -> np.ndarray:
    """The flag of each explained row: a cost cause is an ``anomaly`` only
    upwards; downwards a ``saving`` on a final bill, ``check`` otherwise."""
    flag = pd.Series(causes, dtype=object).map(FLAG_OF_CAUSE).fillna("").to_numpy()
    down = (flag == "anomaly") & fell
    flag[down & final] = SAVING
    flag[down & ~final] = CHECK
    return flag


_TRUE = {"1", "true", "yes", "y", "t"}


def read_csv(stream: TextIO) -> pd.DataFrame:
    """Parse and check the CLI's input; errors name the column and value."""
    try:
        frame = pd.read_csv(
            stream,
            dtype={"series": str, "holiday": str, "final": str, "price_change": str,
                   "price_lump": str},
        )  # fmt: skip
    except pd.errors.EmptyDataError as exc:
        raise InvalidInput("stdin", "", "no CSV header") from exc
    for name in ("series", "day", "cost", "requests"):
        if name not in frame.columns:
            raise InvalidInput(name, None, "column is required")
    days = pd.to_datetime(frame["day"], errors="coerce", utc=True)
    if days.isna().any():
        raise InvalidInput("day", frame.loc[days.isna(), "day"].iloc[0], "not a date")
    frame["day"] = days.dt.tz_convert(None).dt.normalize()
    for name in ("cost", "requests", "tokens", "gpu_hours", "price_lump_amount"):
        if name in frame.columns:
            values = pd.to_numeric(frame[name], errors="coerce")
            bad = values.isna() & frame[name].notna()
            if bad.any():
                raise InvalidInput(name, frame.loc[bad, name].iloc[0], "not a number")
            frame[name] = values
    for name in ("holiday", "final"):
        if name in frame.columns:
            text = frame[name].fillna("").astype(str).str.strip().str.lower()
            frame[name] = text.isin(_TRUE)
    return frame


def write_csv(result: pd.DataFrame, stream: TextIO) -> None:
    out = result.copy()
    out["day"] = pd.DatetimeIndex(out["day"]).strftime("%Y-%m-%d")
    out["level_shift"] = np.where(out["level_shift"], "1", "")
    out[list(OUTPUT_COLUMNS)].to_csv(stream, index=False, float_format="%.10g")


def main(argv: Sequence[str] | None = None, *, stdin: TextIO | None = None,
         stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:  # fmt: skip
    parser = argparse.ArgumentParser(
        prog="python -m analytics.anomalies",
        description="Flag and explain unit-cost anomalies in a daily CSV (stdin -> stdout).",
    )
    defaults = BaselineConfig()
    parser.add_argument("--band-k", type=float, default=defaults.band_k)
    parser.add_argument("--band-floor", type=float, default=defaults.band_floor)
    parser.add_argument("--halflife", type=float, default=defaults.halflife_obs)
    parser.add_argument("--min-requests", type=float, default=defaults.min_requests)
    parser.add_argument("--hold-days", type=int, default=defaults.hold_days)
    args = parser.parse_args(argv)
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    config = BaselineConfig(
        band_k=args.band_k, band_floor=args.band_floor, halflife_obs=args.halflife,
        min_requests=args.min_requests, hold_days=args.hold_days,
    )  # fmt: skip
    try:
        frame = read_csv(stdin)
        result = detect(frame, config=config)
    except InvalidInput as exc:
        print(f"invalid input: {exc}", file=stderr)
        return EXIT_INVALID
    note = result["note"].iat[0] if len(result) else ""
    if note:
        print(f"note: {note}", file=stderr)
    write_csv(result, stdout)
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
