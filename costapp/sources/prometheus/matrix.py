"""Decoding Prometheus ``matrix`` answers without a Python object per sample.

At backfill sizes ``response.json()`` was half of the adapter's time: a list, a
float and a str per sample, then the garbage collector walking them. Here one
compiled pass (``compiled``, numba) reads every ``values`` block of the
body into float64 arrays, and only the labels go through ``json``.

The parser computes a number itself only where that is exact (Clinger's fast
path: at most 15-16 significant digits and a power of ten up to 22, which is
every timestamp Prometheus writes and most values); the others (Go's shortest
text of a double often has 17 digits: ``0.30000000000000004``) are cast
together by Arrow, whose parser (fast_float) is correctly rounded as
``float()`` is. Any layout but Prometheus's own (spaces, quoted timestamps,
other keys inside a pair) is decoded by ``json`` in full instead. So the
result is always ``float()`` of every timestamp and value text, NaN, +-Inf
and -0.0 included (docs/benchmarks.md, telemetry backfill, for the timings).
"""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np

# One (labels, times in s, values) per series.
Samples = tuple[dict[str, str], np.ndarray, np.ndarray]

# The fewest bytes a sample takes ([t,"v"] and the comma or bracket after
# it), and a block ("values":[ and one sample): the parser's arrays are sized
# from them, so no body can need more (the parser checks it all the same).
_SAMPLE_BYTES = 8
_BLOCK_BYTES = 18


def matrix_from_json(body: bytes) -> list[Samples]:
    """Decode a Prometheus ``matrix`` answer without a Python object per sample.

    The ``values`` blocks are parsed by compiled code, the rest (labels) by
    ``json``. The result equals ``float()`` of every timestamp and value,
    NaN and +-Inf included. A body of any other layout is decoded by ``json``
    in full instead.
    """
    found = _parse_values(body)
    if found is None:
        return _matrix_slow(body)
    labels_text, blocks = found
    doc = json.loads(labels_text)
    if doc.get("status") != "success":
        raise ValueError(f"status {doc.get('status')!r}: {doc.get('error', '')}")
    data = doc.get("data") or {}
    if data.get("resultType") != "matrix":
        raise ValueError(f"resultType {data.get('resultType')!r}, not a matrix")
    result = data.get("result") or []
    if not blocks:
        return _matrix_slow(body) if result else []
    out: list[Samples] = []
    for item in result:
        k = item.get("values")
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(blocks):
            return _matrix_slow(body)
        out.append((item.get("metric") or {}, *blocks[k]))
    return out


def _parse_values(
    body: bytes,
) -> tuple[bytes, list[tuple[np.ndarray, np.ndarray]]] | None:
    """The body with each ``values`` block replaced by its number, and each
    block's times and values; None when a block is laid out otherwise."""
    # Imported on first use: numba's import and the compiled code's load
    # stay out of the processes that never decode a matrix.
    from costapp.sources.prometheus import compiled

    size = len(body)
    # np.empty maps its pages on first write: the unused tail costs no memory.
    spans = np.empty((size // _BLOCK_BYTES + 1, 2), dtype=np.int64)
    firsts = np.empty(spans.shape[0] + 1, dtype=np.int64)
    times = np.empty(size // _SAMPLE_BYTES + 1)
    values = np.empty_like(times)
    inexact_slots = np.empty(2 * times.size, dtype=np.int64)
    inexact_ends = np.empty_like(inexact_slots)
    inexact_text = np.empty(size, dtype=np.uint8)
    blocks, _, inexact = compiled.parse_values_blocks(
        np.frombuffer(body, dtype=np.uint8),
        spans,
        firsts,
        times,
        values,
        inexact_slots,
        inexact_ends,
        inexact_text,
    )
    if blocks == compiled.OTHER_LAYOUT:
        return None
    if inexact and not _cast_exactly(
        inexact_slots[:inexact],
        inexact_ends[:inexact],
        inexact_text,
        times,
        values,
    ):
        return None
    view = memoryview(body)
    pieces: list[memoryview | bytes] = []
    pos = 0
    for k, (start, end) in enumerate(spans[:blocks].tolist()):
        pieces += (view[pos:start], b'"values":%d' % k)
        pos = end
    pieces.append(view[pos:])
    bounds = firsts[: blocks + 1].tolist()
    return b"".join(pieces), [(times[a:b], values[a:b]) for a, b in pairwise(bounds)]


def _cast_exactly(
    slots: np.ndarray,
    ends: np.ndarray,
    text: np.ndarray,
    times: np.ndarray,
    values: np.ndarray,
) -> bool:
    """Write the numbers the parser left (their texts end to end in ``text``,
    each ending at ``ends``; slot 2k is time k, 2k + 1 value k) by one Arrow
    cast; False when one is no number Arrow reads."""
    import pyarrow as pa
    import pyarrow.compute as pa_compute

    offsets = np.zeros(ends.size + 1, dtype=np.int64)
    offsets[1:] = ends
    texts = pa.Array.from_buffers(
        pa.large_string(),
        ends.size,
        [None, pa.py_buffer(offsets), pa.py_buffer(text[: ends[-1]])],
    )
    try:
        # Arrow parses as float() does: correctly rounded, overflow to +-inf.
        numbers = pa_compute.cast(texts, pa.float64()).to_numpy()
    except pa.ArrowInvalid:
        return False
    is_value = (slots & 1).astype(bool)
    times[slots[~is_value] >> 1] = numbers[~is_value]
    values[slots[is_value] >> 1] = numbers[is_value]
    return True


def _matrix_slow(body: bytes) -> list[Samples]:
    doc = json.loads(body)
    out: list[Samples] = []
    for item in doc["data"]["result"]:
        values = item.get("values") or []
        if not values:
            continue
        t = np.array([float(p[0]) for p in values], dtype=float)
        v = np.array([float(p[1]) for p in values], dtype=float)
        out.append((item.get("metric") or {}, t, v))
    return out
