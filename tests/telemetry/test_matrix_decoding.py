"""The fast matrix decoder reads exactly what json.loads + float() reads."""

from __future__ import annotations

import json
import math
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
from costapp.sources.prometheus import matrix as matrix_module
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


@settings(max_examples=100, deadline=None)
@given(st.lists(series, max_size=6), st.integers(1, 400))
def test_blocks_parsed_in_groups_of_any_size_decode_the_same(
    result: list[dict[str, Any]], chunk_bytes: int
) -> None:
    # A group closes once it holds CHUNK_BYTES: from one block per group to
    # all of them in one, each series keeps its own samples.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matrix_module, "CHUNK_BYTES", chunk_bytes)
        assert_same(matrix(result))


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
