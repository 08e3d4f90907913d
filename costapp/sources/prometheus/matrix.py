"""Decoding Prometheus ``matrix`` answers without a Python object per sample.

At backfill sizes ``response.json()`` was half of the adapter's time: a list, a
float and a str per sample, then the garbage collector walking them. Here the
``values`` blocks are cut out of the body and parsed by Arrow in C++
(docs/benchmarks.md, telemetry).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pa_compute
import pyarrow.csv as pa_csv

# One (labels, times in s, values) per series.
Samples = tuple[dict[str, str], np.ndarray, np.ndarray]

# Where a series' samples start: "values":[[1709510400,"1"],[1709510415.5,"NaN"]].
# Inside a JSON string every '"' is escaped, so this can only be the real key;
# pairs hold no brackets, so the first "]]" after it ends the block.
_VALUES_KEY = b'"values":[['
# Once "],[" becomes a newline (Arrow's replace_substring, without the GIL), a
# block is a two-column CSV, "t,\"v\"" per row, which Arrow's C++ reader turns
# into float64 columns without a Python object per sample (and without the
# GIL, so the other requests' threads keep reading meanwhile).
_PAIR_SEP = "],["
# Between two series: a row whose timestamp is NaN, which no sample has.
_SERIES_END = b'\nNaN,"0"\n'
_CSV_PARSE = pa_csv.ParseOptions(newlines_in_values=False)
_CSV_CONVERT = pa_csv.ConvertOptions(
    column_types={"t": pa.float64(), "v": pa.float64()},
    # "NaN" is a value here, never a missing one.
    null_values=[],
    strings_can_be_null=False,
    quoted_strings_can_be_null=False,
)


def matrix_from_json(body: bytes) -> list[Samples]:
    """Decode a Prometheus ``matrix`` answer without a Python object per sample.

    ``response.json()`` builds a list, a float and a str per sample (and the
    garbage collector then walks those millions of lists); here the ``values``
    blocks are cut out of the body and parsed by Arrow in C++, and
    only the small rest (labels) goes through ``json``. The result equals
    ``float()`` of every timestamp and value, NaN and +-Inf included. A body
    of any other layout is decoded by ``json`` in full instead.
    """
    view = memoryview(body)
    pieces: list[memoryview | bytes] = []
    blocks: list[memoryview] = []
    # Every "[[" and "]]" at once (numpy scans without the GIL; bytes.find
    # holds it for the whole values block); "[[" counts only after "values":.
    octets = np.frombuffer(body, dtype=np.uint8)
    opens = np.flatnonzero((octets[:-1] == 0x5B) & (octets[1:] == 0x5B)).tolist()
    closes = np.flatnonzero((octets[:-1] == 0x5D) & (octets[1:] == 0x5D))
    key_length = len(_VALUES_KEY) - 2
    starts = [
        p + 2
        for p in opens
        if p >= key_length and body.startswith(_VALUES_KEY, p - key_length)
    ]
    ends = np.searchsorted(closes, starts).tolist()
    pos = 0
    for i, k in zip(starts, ends, strict=True):
        if k >= closes.size or i < pos:
            return _matrix_slow(body)
        # Pairs hold no brackets: the first "]]" after the key ends the block.
        j = int(closes[k])
        pieces += (view[pos : i - len(_VALUES_KEY)], b'"values":%d' % len(blocks))
        blocks.append(view[i:j])
        pos = j + 2
    pieces.append(view[pos:])
    doc = json.loads(b"".join(pieces))
    if doc.get("status") != "success":
        raise ValueError(f"status {doc.get('status')!r}: {doc.get('error', '')}")
    data = doc.get("data") or {}
    if data.get("resultType") != "matrix":
        raise ValueError(f"resultType {data.get('resultType')!r}, not a matrix")
    result = data.get("result") or []
    if not blocks:
        return _matrix_slow(body) if result else []
    joined = pa.py_buffer(_SERIES_END.join(blocks))
    one = pa.Array.from_buffers(
        pa.large_binary(),
        1,
        [None, pa.py_buffer(np.array([0, joined.size], dtype=np.int64)), joined],
    )
    csv = pa_compute.replace_substring(one, _PAIR_SEP, "\n")[0].as_buffer()
    try:
        table = pa_csv.read_csv(
            csv,
            # One block: the columns come out as one array each, which numpy
            # then views without a copy.
            read_options=pa_csv.ReadOptions(
                column_names=["t", "v"], use_threads=False, block_size=csv.size + 1
            ),
            parse_options=_CSV_PARSE,
            convert_options=_CSV_CONVERT,
        )
    except pa.ArrowInvalid:
        return _matrix_slow(body)
    if table.column("t").num_chunks != 1:
        return _matrix_slow(body)
    # Array.to_numpy: a view, no copy (ChunkedArray's would import pandas).
    t = table.column("t").chunk(0).to_numpy()
    v = table.column("v").chunk(0).to_numpy()
    ends = np.flatnonzero(np.isnan(t)).tolist()
    if len(ends) != len(blocks) - 1:
        return _matrix_slow(body)
    starts = [0] + [e + 1 for e in ends]
    ends.append(t.size)
    out: list[Samples] = []
    for item in result:
        k = item.get("values")
        if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(blocks):
            return _matrix_slow(body)
        a, b = starts[k], ends[k]
        out.append((item.get("metric") or {}, t[a:b], v[a:b]))
    return out


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
