"""The Prometheus adapter's compiled loops (numba): the matrix parser and the
hourly counter increases.

matrix.py and records.py import this module on first use only: numba's import
and the loading of the compiled code (cached on disk, see ``_compiled``) stay
out of the processes that never read Prometheus (web, beat). ``nogil`` lets
the client's reader threads parse while the records are built.

The parser reads exactly the layout Prometheus writes (util/jsonutil):
``[1709510415,"1"],[1709510415.300,"0.25"]``, timestamps in seconds with 3
decimals when not whole, values by Go's ``strconv.AppendFloat(f, 'f' or 'e',
-1)`` or ``NaN``, ``+Inf``, ``-Inf``. A number is computed here only where
that is exact; otherwise its text is handed back for an exact parser. Any
other byte stops the parse (the caller then decodes the body with ``json``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numba
import numpy as np


def _compiled(
    inline: Literal["never", "always"] = "never",
) -> Callable[[Any], Any]:
    """``numba.njit``, cached on disk where numba finds a writable place.

    numba writes to NUMBA_CACHE_DIR when set, else next to this file, else
    to ~/.cache, and refuses ``cache=True`` when none is writable (code
    owned by root, run by a user without a home, as in the image): the
    functions are then compiled in each process (~10 s, on its first
    decode) rather than not at all. The image sets NUMBA_CACHE_DIR.
    """

    def wrap(function: Any) -> Any:
        try:
            return numba.njit(cache=True, nogil=True, inline=inline)(function)
        except RuntimeError:
            return numba.njit(nogil=True, inline=inline)(function)

    return wrap


# What the parser reports instead of a block count when the text is laid out
# otherwise (spaces, quoted timestamps, a value that is no number, ...).
OTHER_LAYOUT = -1

# Where a series' samples start. Inside a JSON string every '"' is escaped,
# so this can only be the real key.
_KEY = np.frombuffer(b'"values":[[', dtype=np.uint8)
_QUOTE, _COMMA, _OPEN, _CLOSE = ord('"'), ord(","), ord("["), ord("]")
_MINUS, _PLUS, _DOT, _ZERO, _NINE = ord("-"), ord("+"), ord("."), ord("0"), ord("9")
_EXPONENT, _EXPONENT_CAPITAL = ord("e"), ord("E")
_NAN, _INF = np.frombuffer(b"NaN", np.uint8), np.frombuffer(b"Inf", np.uint8)

# Clinger's fast path: a mantissa m < 2**53 is an exact double, and so is
# 10**k for k <= 22 (5**22 < 2**53), so m * 10**k and m / 10**k are one
# correctly rounded operation on exact operands: float() of the text.
_EXACT_POWERS = np.array([float(10**k) for k in range(23)])
_EXACT_MANTISSA = 1 << 53
# More significant digits than this are not accumulated (10**18 < 2**63).
_MAX_DIGITS = 18
# The exponent stops growing here; anything past 22 is not exact anyway.
_EXPONENT_CAP = 100_000

# A number's outcome.
_EXACT, _INEXACT, _MALFORMED = 0, 1, 2


# Left for LLVM to inline: numba's own inlining (inline="always") of this
# one made the parser three times slower.
@_compiled()
def _byte(text: np.ndarray, i: int) -> int:
    # numba does not check bounds: a text cut short reads as a 0 byte.
    return int(text[i]) if i < text.size else 0


@_compiled()
def _find(text: np.ndarray, word: np.ndarray, start: int) -> int:
    last = text.size - word.size
    i = start
    while i <= last:
        if text[i] == word[0]:
            j = 1
            while j < word.size and text[i + j] == word[j]:
                j += 1
            if j == word.size:
                return i
        i += 1
    return -1


@_compiled()
def _matches(text: np.ndarray, i: int, word: np.ndarray) -> bool:
    if i + word.size > text.size:
        return False
    for j in range(word.size):
        if text[i + j] != word[j]:
            return False
    return True


# Inlined by numba: called as functions returning tuples, they cost the
# parser a sixth of its speed.
@_compiled(inline="always")
def _number(text: np.ndarray, i: int) -> tuple[int, float, int]:
    """(end, value, outcome) of ``-?\\d+(\\.\\d+)?([eE][-+]?\\d+)?`` at ``i``.

    The value is exact when the outcome is _EXACT; an _INEXACT number (too
    many digits, too large a power of ten) is left for an exact parser.
    """
    negative = _byte(text, i) == _MINUS
    if negative:
        i += 1
    mantissa = 0
    start = i
    while _ZERO <= _byte(text, i) <= _NINE:
        if i - start < _MAX_DIGITS:
            mantissa = mantissa * 10 + (int(text[i]) - _ZERO)
        i += 1
    digits = i - start  # leading zeros included: a few more go to Arrow
    if digits == 0:
        return i, 0.0, _MALFORMED
    scale = 0  # the power of ten the mantissa is multiplied by
    if _byte(text, i) == _DOT:
        i += 1
        fraction_start = i
        while _ZERO <= _byte(text, i) <= _NINE:
            if digits < _MAX_DIGITS:
                mantissa = mantissa * 10 + (int(text[i]) - _ZERO)
                scale -= 1
            digits += 1
            i += 1
        if i == fraction_start:
            return i, 0.0, _MALFORMED
    if _byte(text, i) in (_EXPONENT, _EXPONENT_CAPITAL):
        i += 1
        sign = _byte(text, i)
        if sign in (_MINUS, _PLUS):
            i += 1
        exponent_start = i
        exponent = 0
        while _ZERO <= _byte(text, i) <= _NINE:
            if exponent < _EXPONENT_CAP:
                exponent = exponent * 10 + (int(text[i]) - _ZERO)
            i += 1
        if i == exponent_start:
            return i, 0.0, _MALFORMED
        scale += -exponent if sign == _MINUS else exponent
    if mantissa == 0 and digits <= _MAX_DIGITS:
        value = 0.0
    elif digits > _MAX_DIGITS or mantissa >= _EXACT_MANTISSA:
        return i, 0.0, _INEXACT
    elif 0 <= scale <= 22:
        value = float(mantissa) * _EXACT_POWERS[scale]
    elif -22 <= scale < 0:
        value = float(mantissa) / _EXACT_POWERS[-scale]
    else:
        return i, 0.0, _INEXACT
    return i, -value if negative else value, _EXACT


@_compiled()
def _digit(text: np.ndarray, i: int) -> int:
    return int(text[i]) - _ZERO


@_compiled()
def _ten_digits(text: np.ndarray, i: int) -> int:
    """The 10 digits at ``i`` (in bounds) as an integer, or -1."""
    all_digits = True
    for k in range(10):
        all_digits &= _ZERO <= text[i + k] <= _NINE
    if not all_digits:
        return -1
    # Two independent halves: half the chain of multiply-adds.
    high = (
        _digit(text, i) * 10000
        + _digit(text, i + 1) * 1000
        + _digit(text, i + 2) * 100
        + _digit(text, i + 3) * 10
        + _digit(text, i + 4)
    )
    low = (
        _digit(text, i + 5) * 10000
        + _digit(text, i + 6) * 1000
        + _digit(text, i + 7) * 100
        + _digit(text, i + 8) * 10
        + _digit(text, i + 9)
    )
    return high * 100000 + low


@_compiled()
def _three_digits(text: np.ndarray, i: int) -> int:
    """The 3 digits at ``i`` (in bounds) as an integer, or -1."""
    if not (
        _ZERO <= text[i] <= _NINE
        and _ZERO <= text[i + 1] <= _NINE
        and _ZERO <= text[i + 2] <= _NINE
    ):
        return -1
    return _digit(text, i) * 100 + _digit(text, i + 1) * 10 + _digit(text, i + 2)


@_compiled(inline="always")
def _timestamp(text: np.ndarray, i: int) -> tuple[int, float, int]:
    """(end, value, outcome) of a sample's timestamp at ``i``.

    Prometheus writes seconds since 1970, 10 digits from 2001 to 2286, and
    ".ddd" when not whole: read at their places, without _number's loop
    (whose end the CPU cannot foresee), the parser takes a fifth less time.
    Any other number is read by _number.
    """
    if i + 15 <= text.size:
        after = text[i + 10]
        fraction = after == _DOT and text[i + 14] == _COMMA
        if after == _COMMA or fraction:
            seconds = _ten_digits(text, i)
            if seconds >= 0 and not fraction:
                return i + 10, float(seconds), _EXACT
            millis = _three_digits(text, i + 11) if seconds >= 0 else -1
            if millis >= 0:
                # Below 2**53 and divided by an exact 1000: correctly rounded.
                return i + 14, float(seconds * 1000 + millis) / 1000.0, _EXACT
    return _number(text, i)


@_compiled(inline="always")
def _value(text: np.ndarray, i: int) -> tuple[int, float, int]:
    """(end, value, outcome) of a sample's value text at ``i``: a number, or
    NaN, +Inf, -Inf as Go writes them."""
    first = _byte(text, i)
    if first == _NAN[0] and _matches(text, i, _NAN):
        return i + 3, np.nan, _EXACT
    if first in (_PLUS, _MINUS) and _matches(text, i + 1, _INF):
        return i + 4, np.inf if first == _PLUS else -np.inf, _EXACT
    return _number(text, i)


@_compiled()
def _keep_text(
    body: np.ndarray,
    start: int,
    end: int,
    slot: int,
    index: int,
    slots: np.ndarray,
    ends: np.ndarray,
    text: np.ndarray,
    text_end: int,
) -> int:
    """List the number at ``body[start:end]`` as inexact number ``index``;
    where the listed texts now end, or -1 when the arrays are full."""
    if index == slots.size or text_end + end - start > text.size:
        return -1
    slots[index] = slot
    text[text_end : text_end + end - start] = body[start:end]
    ends[index] = text_end + end - start
    return text_end + end - start


@_compiled()
def parse_values_blocks(
    body: np.ndarray,
    spans: np.ndarray,
    firsts: np.ndarray,
    times: np.ndarray,
    values: np.ndarray,
    inexact_slots: np.ndarray,
    inexact_ends: np.ndarray,
    inexact_text: np.ndarray,
) -> tuple[int, int, int]:
    """Parse every ``"values":[[t,"v"],...]]`` block of ``body`` in one pass.

    Writes, per block b, the span of its text from the key to after the
    closing "]]" (``spans[b]``) and where its samples start and end
    (``firsts[b]``, ``firsts[b + 1]``); per sample k, ``times[k]`` and
    ``values[k]``. A number that is not exact here is listed instead: its
    slot (2k for a time, 2k + 1 for a value) in ``inexact_slots``, its text
    appended to ``inexact_text``, where that text ends in ``inexact_ends``.

    Returns (blocks, samples, inexact numbers), with OTHER_LAYOUT as the
    block count when a block is laid out otherwise or an array is too small.
    """
    blocks = samples = inexact = 0
    text_end = 0
    pos = 0
    while True:
        key = _find(body, _KEY, pos)
        if key < 0:
            return blocks, samples, inexact
        if blocks == spans.shape[0] or blocks + 1 >= firsts.size:
            return OTHER_LAYOUT, 0, 0
        spans[blocks, 0] = key
        firsts[blocks] = samples
        i = key + _KEY.size  # after the "[" that opens a pair
        while True:
            if samples == times.size:
                return OTHER_LAYOUT, 0, 0
            # t,"v"]
            end, number, outcome = _timestamp(body, i)
            if outcome == _INEXACT:
                text_end = _keep_text(
                    body,
                    i,
                    end,
                    2 * samples,
                    inexact,
                    inexact_slots,
                    inexact_ends,
                    inexact_text,
                    text_end,
                )
                if text_end < 0:
                    return OTHER_LAYOUT, 0, 0
                inexact += 1
            if (
                outcome == _MALFORMED
                or _byte(body, end) != _COMMA
                or _byte(body, end + 1) != _QUOTE
            ):
                return OTHER_LAYOUT, 0, 0
            times[samples] = number
            i = end + 2
            end, number, outcome = _value(body, i)
            if outcome == _INEXACT:
                text_end = _keep_text(
                    body,
                    i,
                    end,
                    2 * samples + 1,
                    inexact,
                    inexact_slots,
                    inexact_ends,
                    inexact_text,
                    text_end,
                )
                if text_end < 0:
                    return OTHER_LAYOUT, 0, 0
                inexact += 1
            if (
                outcome == _MALFORMED
                or _byte(body, end) != _QUOTE
                or _byte(body, end + 1) != _CLOSE
            ):
                return OTHER_LAYOUT, 0, 0
            values[samples] = number
            i = end + 2
            samples += 1
            # ,[ before the next pair, or ] after the last
            if _byte(body, i) == _COMMA and _byte(body, i + 1) == _OPEN:
                i += 2
            elif _byte(body, i) == _CLOSE:
                spans[blocks, 1] = pos = i + 1
                firsts[blocks + 1] = samples
                blocks += 1
                break
            else:
                return OTHER_LAYOUT, 0, 0


@_compiled()
def hourly_increases(
    values: np.ndarray, first: np.ndarray, counts: np.ndarray, born: bool
) -> np.ndarray:
    """Per run of samples (``counts[k]`` from ``first[k]``, the runs end to
    end), the sum of the counter's reset-aware increases.

    With ``np.bincount`` over ``counter_increases``' array (five numpy
    passes and the calls between them) records.py's _counter_hourly took
    ~70 us a series, the main part of the records' CPU in a backfill
    (docs/benchmarks.md); with this loop, ~30.

    Bit for bit ``np.bincount(run_of_each_sample, weights=counter_increases(
    values, born_in_window=born))``: each increase is the same float (the
    difference, or the value itself after a reset; the first sample's is its
    value when born, else 0), and bincount adds them one by one in order
    from 0.0, as here.
    """
    out = np.zeros(first.size)
    for k in range(first.size):
        total = 0.0
        for i in range(first[k], first[k] + counts[k]):
            if i == 0:
                total += values[0] if born else 0.0
                continue
            delta = values[i] - values[i - 1]
            # NaN compares false, as in np.where(delta >= 0, ...).
            total += delta if delta >= 0 else values[i]
        out[k] = total
    return out
