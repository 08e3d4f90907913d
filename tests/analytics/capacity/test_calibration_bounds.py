"""Calibration and bench JSON, bounded: numbers are counted in digits before
conversion, figures are finite, not negative and within their bounds, and
every refusal names the field path and the value. Pure: no Django."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.capacity.calibration import (
    calibration_from_dict,
    import_vllm_bench_serve,
    load_calibration,
)
from analytics.capacity.calibration_io import (
    MAX_COUNT,
    MAX_INT_DIGITS,
    bench_serve_figures,
    calibration_json,
)
from analytics.capacity.calibration_types import CalibrationKey
from analytics.errors import InvalidInput

FIXTURES = Path(__file__).parent / "fixtures"
BENCH = json.loads(
    (
        Path(__file__).parents[2]
        / "capacity"
        / "fixtures"
        / "vllm_bench_serve_qwen3_vl_8b_1qps.json"
    ).read_text()
)
KEY = CalibrationKey(gpu="L40S", model="Qwen3-8B", tp=1, engine_version="0.10.1")


@given(st.integers(min_value=-(10**400), max_value=10**400))
def test_an_integer_is_read_or_refused_by_its_digits_never_overflowing(n: int) -> None:
    try:
        document = calibration_json(json.dumps({"results": [{"completed": n}]}))
    except InvalidInput as exc:
        assert len(str(abs(n))) > MAX_INT_DIGITS
        assert exc.field == "results[0].completed"
        assert f"is an integer of {len(str(abs(n))):,} digits" in exc.reason
    else:
        assert document["results"][0]["completed"] == n


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_a_finite_float_round_trips(x: float) -> None:
    assert calibration_json(json.dumps([x])) == [x]


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        ('{"completed": ' + "9" * 4300 + "}", "completed", "4,300 digits"),
        ('[{"a": 1}, {"b": -' + "9" * 21 + "}]", "results[1].b", "21 digits"),
        ('{"x": 1.' + "5" * 80 + "}", "x", "a number of 82 characters; at most 64"),
        ('{"x": 1e400}', "x", "overflows a float"),
        ('{"x": "a\\u0000b"}', "x", "contains a NUL character"),
        ('{"x": ["\\ud800"]}', "x[0]", "lone surrogate"),
        ('{"a\\u0000": 1}', "<document> key", "contains a NUL character"),
        ("[" * 25 + "]" * 25, "results" + "[0]" * 21, "nested more than 20"),
        ("[" * 5000 + "]" * 5000, "<file>", "nested more than 20"),
        ('{"a": 1,}', "<file>", "not valid JSON"),
    ],
)
def test_a_refusal_names_the_field_path(text: str, field: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        calibration_json(text)
    assert refused.value.field == field
    assert reason in refused.value.reason


@given(
    name=st.sampled_from(
        ["completed", "duration", "total_input_tokens", "total_output_tokens"]
    ),
    value=st.one_of(
        st.floats(max_value=0, allow_nan=False),
        st.floats(min_value=1e13),
        st.just(math.nan),
        st.integers(max_value=0),
        st.integers(min_value=10**13),
        st.text(max_size=5),
        st.none(),
        st.booleans(),
    ),
)
def test_a_count_or_duration_out_of_bounds_is_refused_naming_it(
    name: str, value: object
) -> None:
    with pytest.raises(InvalidInput) as refused:
        bench_serve_figures({**BENCH, name: value}, "results[0]")
    assert refused.value.field == f"results[0].{name}"


def test_completed_at_1e30_is_refused_and_a_sound_run_is_kept() -> None:
    with pytest.raises(InvalidInput) as refused:
        import_vllm_bench_serve(dict(BENCH, completed=1e30), key=KEY)
    assert str(refused.value) == (
        f"results[0].completed=1e+30: must be at most {MAX_COUNT:g}"
    )
    figures = bench_serve_figures(BENCH, "results[0]")
    assert figures["completed"] == 200 and figures["step_ms"] == BENCH["median_itl_ms"]
    assert import_vllm_bench_serve(BENCH, key=KEY).fit.n_points == 1


def test_a_calibration_file_with_a_huge_integer_is_refused_by_the_loader(
    tmp_path: Path,
) -> None:
    document = json.loads((FIXTURES / "calibration_malformed.json").read_text())
    text = json.dumps(document).replace('"schema_version": 1', '"schema_version": 7')
    path = tmp_path / "cal.json"
    path.write_text(text.replace("7", "7" * 400, 1))
    with pytest.raises(InvalidInput) as refused:
        load_calibration(path)
    assert refused.value.field == "schema_version"
    assert "400 digits" in refused.value.reason


@pytest.mark.parametrize(
    ("points", "field"),
    [([1], "points[0]"), ([{"batch": "x"}], "points[0].batch"),
     ([{"batch": 1e300}], "points[0].batch")],
)  # fmt: skip
def test_stored_points_are_objects_of_bounded_numbers(
    points: list[object], field: str
) -> None:
    document = {
        "schema_version": 1,
        "kind": "engine_measurements",
        "key": {"gpu": "L40S", "model": "Qwen3-8B", "tp": 1},
        "params": {"t0_s": 0, "bw_eff_bytes_per_s": 8e11, "decode_flops_eff": 1e14,
                   "prefill_flops_eff": 1e14, "p0_s": 0},
        "fit": {"n_points": 1},
        "points": points,
    }  # fmt: skip
    with pytest.raises(InvalidInput) as refused:
        calibration_from_dict(document)
    assert refused.value.field == field
