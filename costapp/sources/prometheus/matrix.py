"""Decoding Prometheus ``matrix`` answers without a Python object per sample.

At backfill sizes ``response.json()`` was half of the adapter's time: a list, a
float and a str per sample, then the garbage collector walking them. Here the
``values`` blocks are cut out of the body, their numbers located with numpy and
converted by one Arrow cast in C++ (docs/benchmarks.md, telemetry).
"""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pa_compute

# One (labels, times in s, values) per series.
Samples = tuple[dict[str, str], np.ndarray, np.ndarray]

# Where a series' samples start: "values":[[1709510400,"1"],[1709510415.5,"NaN"]].
# Inside a JSON string every '"' is escaped, so this can only be the real key;
# pairs hold no brackets, so the first "]]" after it ends the block.
_VALUES_KEY = b'"values":[['
# Where one series' samples end and the next series begins, when "values" is
# its last key (as Prometheus writes it). Its braces occur in no values block
# and its bare quote in no JSON string, so the first one after a block's start
# ends that block unless a colon (another key) lies between. bytes.find skips
# through the digits several bytes at a time: ~3x faster than for "]]".
_NEXT_SERIES = b']]},{"metric":'
# The blocks joined by the text between two pairs, so that every sample of the
# answer reads the same: t,"v"],[t,"v"],[ ... ,[t,"v"
_PAIR_SEP = b"],["
# The bytes around the numbers; with them deleted the numbers lie end to end,
# one Arrow string each once the commas' positions say where each ends.
_PUNCTUATION = b'[]",'
_COMMA, _QUOTE = b",", b'"'
# Blocks are parsed in groups of about this many bytes: every numpy pass over
# a group (the comma scan, the layout checks, the offsets) then stays in the
# CPU's cache instead of streaming an answer's 10 MB through memory each time.
CHUNK_BYTES = 1 << 18


def matrix_from_json(body: bytes) -> list[Samples]:
    """Decode a Prometheus ``matrix`` answer without a Python object per sample.

    ``response.json()`` builds a list, a float and a str per sample (and the
    garbage collector then walks those millions of lists); here the ``values``
    blocks are cut out of the body and their numbers cast by Arrow in C++, and
    only the small rest (labels) goes through ``json``. The result equals
    ``float()`` of every timestamp and value, NaN and +-Inf included. A body
    of any other layout is decoded by ``json`` in full instead.
    """
    found = _values_blocks(body)
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
    samples = _blocks_samples(blocks)
    if samples is None:
        return _matrix_slow(body)
    out: list[Samples] = []
    for item in result:
        k = item.get("values")
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(blocks):
            return _matrix_slow(body)
        out.append((item.get("metric") or {}, *samples[k]))
    return out


def _blocks_samples(
    blocks: list[memoryview],
) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Each block's times and values, parsed a group of blocks of about
    CHUNK_BYTES at a time; None when a group is laid out otherwise."""
    out: list[tuple[np.ndarray, np.ndarray]] = []
    group: list[memoryview] = []
    size = 0
    for i, block in enumerate(blocks):
        group.append(block)
        size += len(block)
        if size < CHUNK_BYTES and i + 1 < len(blocks):
            continue
        parsed = _numbers(_PAIR_SEP.join(group))
        if parsed is None:
            return None
        numbers, commas = parsed
        t, v = numbers[0::2], numbers[1::2]
        # Two commas per sample: a block's first sample follows all the
        # commas of the blocks (and separators) before it in its group.
        starts = np.cumsum([0] + [len(b) + len(_PAIR_SEP) for b in group[:-1]])
        firsts = (np.searchsorted(commas, starts) // 2).tolist()
        firsts.append(t.size)
        out.extend((t[a:b], v[a:b]) for a, b in pairwise(firsts))
        group, size = [], 0
    return out


def _values_blocks(body: bytes) -> tuple[bytes, list[memoryview]] | None:
    """The body with each ``values`` block replaced by its number, and the
    blocks (between "[[" and "]]"); None when a block has no end."""
    view = memoryview(body)
    pieces: list[memoryview | bytes] = []
    blocks: list[memoryview] = []
    pos = 0
    while (key := body.find(_VALUES_KEY, pos)) >= 0:
        i = key + len(_VALUES_KEY)
        j = body.find(_NEXT_SERIES, i)
        if j < 0 or body.find(b":", i, j) >= 0:
            # The last series, or one whose "values" is not its last key (the
            # text found then ends a later series: a key's colon lies between).
            # Pairs hold no brackets: the first "]]" after the key ends it.
            j = body.find(b"]]", i)
        if j < 0:
            return None
        pieces += (view[pos:key], b'"values":%d' % len(blocks))
        blocks.append(view[i:j])
        pos = j + 2
    pieces.append(view[pos:])
    return b"".join(pieces), blocks


def _numbers(joined: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """t0, v0, t1, v1, ... of ``t,"v"],[t,"v"...`` as float64, each exactly
    ``float()`` of its text, and the positions of the commas; None when the
    text is laid out otherwise."""
    octets = np.frombuffer(joined, dtype=np.uint8)
    commas = np.flatnonzero(octets == ord(_COMMA))
    if commas.size % 2 == 0 or octets[-1] != ord(_QUOTE) or commas[0] == 0:
        return None
    inside, between = commas[0::2], commas[1::2]
    # t,"v  inside a pair and "],[  between two, read as one 2- and one 4-byte
    # word per comma: anything else is another layout.
    if not (
        bool(np.all(_words(joined, 2)[inside] == _word(b',"')))
        and bool(np.all(_words(joined, 4)[between - 2] == _word(b'"],[')))
    ):
        return None
    # With the punctuation gone (the 6 bytes ,"  "],[ of each pair), the k-th
    # number (t0, v0, t1, ...) ends 3k bytes before the k-th comma, a v one
    # byte more.
    offsets = np.empty(commas.size + 2, dtype=np.int64)
    offsets[0] = 0
    offsets[1:-1] = commas - np.arange(0, 3 * commas.size, 3)
    offsets[2:-1:2] -= 1
    offsets[-1] = octets.size - 3 * commas.size
    packed = joined.translate(None, _PUNCTUATION)
    # Only the delimiters checked above were deleted: a number holding a
    # bracket, quote or comma of its own would leave the lengths unequal.
    if len(packed) != offsets[-1]:
        return None
    texts = pa.Array.from_buffers(
        pa.large_string(),
        commas.size + 1,
        [None, pa.py_buffer(offsets), pa.py_buffer(packed)],
    )
    try:
        # Arrow's cast parses as float() does (correctly rounded; NaN, Inf).
        numbers: np.ndarray = pa_compute.cast(texts, pa.float64()).to_numpy()
    except pa.ArrowInvalid:
        return None
    return numbers, commas


def _words(text: bytes, size: int) -> np.ndarray:
    """Every ``size`` bytes of ``text`` at every offset, as one integer each."""
    return np.ndarray(
        (len(text) - size + 1,), dtype=f"<u{size}", buffer=text, strides=(1,)
    )


def _word(octets: bytes) -> int:
    return int.from_bytes(octets, "little")


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
