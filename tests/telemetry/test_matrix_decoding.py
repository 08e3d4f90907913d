"""The fast matrix decoder reads exactly what json.loads + float() reads."""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costapp.sources.base import DeploymentHourRecord, Window
from costapp.sources.prometheus import (
    Options,
    PrometheusClient,
    PrometheusConfig,
    PrometheusSource,
    Target,
)
from costapp.sources.prometheus.matrix import matrix_from_json
from tests.telemetry.conftest import BUDGET, PromServer
from tests.telemetry.synth import T0

DAY = 86400


def at(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def reference(body: bytes) -> list[tuple[dict[str, str], list[float], list[float]]]:
    out = []
    for item in json.loads(body)["data"]["result"]:
        values = item["values"]
        out.append(
            (
                item["metric"],
                [float(p[0]) for p in values],
                [float(p[1]) for p in values],
            )
        )
    return out


def prometheus_text(v: float) -> str:
    # Prometheus writes values as strings: "NaN", "+Inf", "-Inf", or digits.
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def matrix(result: list[dict[str, Any]]) -> bytes:
    body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    return json.dumps(body, separators=(",", ":")).encode()


def no_slow_path(body: bytes) -> Any:
    raise AssertionError("a well-formed matrix must not need the json fallback")


def assert_same(body: bytes) -> None:
    with mock.patch("costapp.sources.prometheus.matrix._matrix_slow", no_slow_path):
        got = matrix_from_json(body)
    want = reference(body)
    assert [g[0] for g in got] == [w[0] for w in want]
    for (_, t, v), (_, wt, wv) in zip(got, want, strict=True):
        assert t.dtype == v.dtype == np.float64
        np.testing.assert_array_equal(t, np.array(wt))
        np.testing.assert_array_equal(v, np.array(wv))  # NaN equals NaN here
        assert [math.copysign(1, x) for x in v] == [math.copysign(1, x) for x in wv]


label_text = st.lists(
    st.sampled_from([*'ab]["\\,:{}\n', '"values":[[', "]]", "é", "NaN"]), max_size=8
).map("".join)
sample_value = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**15), 10**15).map(float),
)
series = st.fixed_dictionaries(
    {
        "metric": st.dictionaries(
            st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True), label_text
        ),
        "values": st.lists(
            st.tuples(
                st.integers(1_500_000_000_000, 1_800_000_000_000).map(
                    lambda ms: ms / 1000 if ms % 1000 else ms // 1000
                ),
                sample_value.map(prometheus_text),
            ).map(list),
            min_size=1,
            max_size=40,
        ),
    }
)


@settings(max_examples=200, deadline=None)
@given(st.lists(series, max_size=6))
def test_any_matrix_decodes_exactly_as_json_and_float_would(
    result: list[dict[str, Any]],
) -> None:
    assert_same(matrix(result))


def go_text(v: float) -> str:
    # Prometheus's own text (util/jsonutil.MarshalFloat): Go's shortest
    # digits, positional unless |v| < 1e-6 or >= 1e21 ("1e-07", "1.5e+21").
    if math.isnan(v) or math.isinf(v):
        return prometheus_text(v)
    if v == 0:
        return "-0" if math.copysign(1, v) < 0 else "0"
    if 1e-6 <= abs(v) < 1e21:
        return np.format_float_positional(v, unique=True, trim="-")
    return np.format_float_scientific(v, unique=True, trim="-", exp_digits=2)


digits = st.text("0123456789", min_size=1, max_size=30)


def decimals(integer: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # Up to 30 digits on each side of the dot (past 15-17 significant digits
    # the parser must not guess), exponents far beyond a double's range (to 0
    # or inf), signs, -0.
    return st.builds(
        "{}{}{}{}".format,
        st.sampled_from(["", "-"]),
        integer,
        st.one_of(st.just(""), digits.map(".{}".format)),
        st.one_of(
            st.just(""),
            st.builds(
                "{}{}{}".format,
                st.sampled_from("eE"),
                st.sampled_from(["", "+", "-"]),
                st.integers(0, 400),
            ),
        ),
    )


# A timestamp is a JSON number (no leading zeros); a value's text is read by
# float(), which takes them.
json_decimal = decimals(
    st.one_of(
        st.just("0"), st.builds("{}{}".format, st.sampled_from("123456789"), digits)
    )
)
any_decimal = decimals(digits)


def series_of(times: st.SearchStrategy[Any], values: st.SearchStrategy[str]) -> Any:
    return st.fixed_dictionaries(
        {
            "metric": st.dictionaries(st.sampled_from("abc"), label_text, max_size=2),
            "values": st.lists(
                st.tuples(times, values).map(list), min_size=1, max_size=30
            ),
        }
    )


def matrix_text(result: list[dict[str, Any]]) -> bytes:
    # Numbers written as given (json.dumps would quote a str timestamp).
    def pairs(values: list[list[Any]]) -> str:
        return ",".join(f'[{t},"{v}"]' for t, v in values)

    series_text = ",".join(
        f'{{"metric":{json.dumps(s["metric"], separators=(",", ":"))},'
        f'"values":[{pairs(s["values"])}]}}'
        for s in result
    )
    return (
        '{"status":"success","data":{"resultType":"matrix","result":['
        f"{series_text}]}}}}"
    ).encode()


milliseconds = st.integers(-(10**13), 10**13)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        series_of(
            # As Prometheus writes them: seconds, and 3 decimals when not whole.
            milliseconds.map(
                lambda ms: (
                    f"{'-' if ms < 0 else ''}{abs(ms) // 1000}"
                    + (f".{abs(ms) % 1000:03d}" if ms % 1000 else "")
                )
            ),
            st.floats(allow_nan=True, allow_infinity=True).map(go_text),
        ),
        max_size=5,
    )
)
def test_prometheus_text_is_read_by_the_compiled_parser_exactly(
    result: list[dict[str, Any]],
) -> None:
    # 17-digit values ("0.30000000000000004") go to Arrow, the rest is
    # computed by the parser: both must equal float() of the text.
    assert_same(matrix_text(result))


@settings(max_examples=200, deadline=None)
@given(st.lists(series_of(json_decimal, any_decimal), min_size=1, max_size=4))
def test_any_decimal_text_reads_exactly_as_float_reads_it(
    result: list[dict[str, Any]],
) -> None:
    assert_same(matrix_text(result))


@pytest.mark.parametrize(
    "text",
    [
        "0",
        "-0",
        "-0.0",
        "0e5",
        "-0E-400",
        "0.1",
        "-0.30000000000000004",
        "9007199254740993",  # 2**53 + 1: more than a double's mantissa
        "9007199254740992.5",
        "123456789012345678901234567890.123456789",
        "1e22",
        "1e23",  # not an exact product of doubles
        "1e-22",
        "1.5e+21",
        "1e-07",
        "4.9e-324",
        "2.4703282292062327e-324",  # just under half the least subnormal: 0
        "2.2250738585072011e-308",
        "1.7976931348623157e308",
        "1.7976931348623159e308",  # rounds to inf
        "1e400",
        "-1e-400",
        "000123.4500",
        "NaN",
        "+Inf",
        "-Inf",
    ],
)
def test_edge_values_read_exactly_as_float_reads_them(text: str) -> None:
    body = matrix_text([{"metric": {}, "values": [[1, text], [1709510415.3, text]]}])
    assert_same(body)


@pytest.mark.parametrize(
    "timestamp",
    [
        # Prometheus's own (10 digits, 3 decimals when not whole), then
        # numbers next to that layout: read by the general path.
        "1709510415.300",
        "1709510415.007",
        "9999999999.999",
        "1000000000",
        "1709510415.1",
        "1709510415.12",
        "1709510415.1234",
        "17095104150",
        "170951041",
        "170951041.500",
        "1709510415e0",
        "-1.500",
        "0.001",
        "1e9",
    ],
)
def test_timestamps_with_milliseconds_read_exactly(timestamp: str) -> None:
    assert_same(matrix_text([{"metric": {}, "values": [[timestamp, "1"]]}]))


@pytest.mark.parametrize(
    "value",
    # float() reads these; Prometheus never writes them: read by json + float().
    ["+1", " 1", "1 ", "1_000", ".5", "5.", "Infinity", "inf", "nan", "1e", "-"],
)
def test_values_prometheus_never_writes_fall_back_and_read_exactly(value: str) -> None:
    body = matrix_text([{"metric": {}, "values": [[1, "2"], [3, value]]}])
    try:
        want = float(value)
    except ValueError:
        with pytest.raises(ValueError):
            matrix_from_json(body)
        return
    [(_, _, v)] = matrix_from_json(body)
    np.testing.assert_array_equal(v, [2.0, want])


def test_arrays_too_small_for_the_body_stop_the_parser() -> None:
    from costapp.sources.prometheus import compiled

    body = np.frombuffer(
        matrix_text([{"metric": {}, "values": [[1, "2"]] * 3}]), np.uint8
    )

    def parse(blocks: int, samples: int) -> int:
        blocks_done, _, _ = compiled.parse_values_blocks(
            body,
            np.empty((blocks, 2), np.int64),
            np.empty(blocks + 1, np.int64),
            np.empty(samples),
            np.empty(samples),
            np.empty(2 * samples, np.int64),
            np.empty(2 * samples, np.int64),
            np.empty(body.size, np.uint8),
        )
        return int(blocks_done)

    assert parse(1, 3) == 1
    assert parse(1, 2) == compiled.OTHER_LAYOUT
    assert parse(0, 3) == compiled.OTHER_LAYOUT


def test_answers_decoded_in_threads_at_once_read_the_same() -> None:
    # The parser releases the GIL: the client's readers run it side by side.
    bodies = [
        matrix(
            [
                {
                    "metric": {"i": str(i)},
                    "values": [[t, str(t * i / 7)] for t in range(2000)],
                }
            ]
        )
        for i in range(8)
    ]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(matrix_from_json, bodies))
    for body, decoded in zip(bodies, got, strict=True):
        want = reference(body)
        for (_, t, v), (_, wt, wv) in zip(decoded, want, strict=True):
            np.testing.assert_array_equal(t, wt)
            np.testing.assert_array_equal(v, wv)


def test_labels_that_look_like_the_values_key_do_not_confuse_the_decoder() -> None:
    body = matrix(
        [
            {"metric": {"a": 'x]]"values":[[1,"2"]]'}, "values": [[1.5, "NaN"]]},
            {"metric": {}, "values": [[2, "+Inf"], [3, "-Inf"], [4, "-0"]]},
        ]
    )
    assert_same(body)


def test_an_empty_result_is_no_series() -> None:
    assert matrix_from_json(matrix([])) == []


def test_a_vector_answer_is_refused_rather_than_misread() -> None:
    body = json.dumps(
        {
            "status": "success",
            "data": {"resultType": "vector", "result": [{"metric": {}, "value": []}]},
        }
    ).encode()
    with pytest.raises(ValueError, match="not a matrix"):
        matrix_from_json(body)


def test_a_value_that_is_not_a_number_falls_back_to_the_exact_slow_path() -> None:
    body = matrix([{"metric": {}, "values": [[1, "1"], [2, "twelve"]]}])
    with pytest.raises(ValueError, match="twelve"):
        matrix_from_json(body)


def test_prometheus_is_asked_not_to_gzip_unless_configured(settings: Any) -> None:
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    plain = PrometheusClient(PrometheusConfig.from_settings())
    assert plain.session.headers["Accept-Encoding"] == "identity"
    settings.PROMETHEUS_GZIP = True
    zipped = PrometheusClient(PrometheusConfig.from_settings())
    assert "gzip" in zipped.session.headers["Accept-Encoding"]


@pytest.mark.integration
def test_a_target_denser_than_assumed_is_refused_halved_and_read_identically(
    prometheus: PromServer,
) -> None:
    # Assuming 10-minute scrapes of 1-minute data makes every chunk ~10x over
    # Prometheus's --query.max-samples: its 422 text must be read from the raw
    # answer, the chunk halved until it fits, and nothing read differently.
    targets = [Target("chat-v1", "vllm", 'namespace="chat"')]
    window = Window(at(T0 + DAY), at(T0 + 2 * DAY))

    def records(interval_s: float) -> tuple[list[Any], int]:
        source = PrometheusSource(
            targets=targets,
            config=PrometheusConfig(url=prometheus.url, max_samples=BUDGET),
            options=Options(scrape_interval_s=interval_s),
            now=lambda: at(T0 + 3 * DAY),
        )
        out = [r for batch in source.fetch(window) for r in batch.records]
        return out, source.client.requests

    dense, n_dense = records(600)
    right, n_right = records(60)
    assert n_dense > n_right
    assert dense == right
    assert len([r for r in right if isinstance(r, DeploymentHourRecord)]) == 24


def assert_same_by_any_path(body: bytes) -> None:
    got = matrix_from_json(body)
    want = reference(body)
    assert [g[0] for g in got] == [w[0] for w in want]
    for (_, t, v), (_, wt, wv) in zip(got, want, strict=True):
        np.testing.assert_array_equal(t, np.array(wt))
        np.testing.assert_array_equal(v, np.array(wv))


@settings(max_examples=100, deadline=None)
@given(st.lists(series, max_size=4))
def test_a_matrix_written_with_spaces_reads_the_same_through_json(
    result: list[dict[str, Any]],
) -> None:
    body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    assert_same_by_any_path(json.dumps(body).encode())


@pytest.mark.parametrize(
    "values",
    [
        # Another server's layouts: never cut at the wrong byte, read by json.
        '[[1, "2"],[3,"4"]]',
        '[[1,"2"], [3,"4"]]',
        '[["1","2"],[3,"4"]]',
        '[[1,2],[3,"4"]]',
        '[[1,"2","5"],[3,"4"]]',
        '[[1,"2"],[3,"4" ]]',
        '[[1,"\\u0032"],[3,"4"]]',
    ],
)
def test_pairs_laid_out_otherwise_fall_back_and_read_exactly(values: str) -> None:
    body = (
        '{"status":"success","data":{"resultType":"matrix","result":['
        '{"metric":{"a":"b"},"values":[[7,"8"]]},'
        f'{{"metric":{{}},"values":{values}}}]}}}}'
    ).encode()
    assert_same_by_any_path(body)


def test_series_of_one_sample_each_keep_their_own_samples() -> None:
    body = matrix(
        [{"metric": {"i": str(i)}, "values": [[i, str(i / 10)]]} for i in range(5)]
    )
    assert_same(body)


@pytest.mark.parametrize(
    "result",
    [
        # Native histograms after the float samples of the same series.
        '{"metric":{"a":"1"},"values":[[1,"2"]],"histograms":[[3,{"count":"4"}]]},'
        '{"metric":{"b":"2"},"values":[[5,"6"],[7,"8"]]}',
        # Keys in the other order.
        '{"values":[[1,"2"]],"metric":{"a":"x]]},{\\"metric\\":"}},'
        '{"values":[[3,"4"]],"metric":{}}',
    ],
)
def test_series_with_other_keys_around_their_values_read_exactly(result: str) -> None:
    body = (
        f'{{"status":"success","data":{{"resultType":"matrix","result":[{result}]}}}}'
    ).encode()
    assert_same_by_any_path(body)
