"""A calibration or bench file's numbers are bounded before any conversion:
a 4,300-digit integer, ``completed: 1e30`` and negative counts or durations
are refused naming the field and the value (cut), on the upload page and on
the command line; never a 500, never Python's own text, nothing stored."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils.html import escape

from analytics.errors import InvalidInput
from costapp.capacity import services
from costapp.models import Calibration
from tests.capacity.conftest import FIXTURES

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

BENCH_TEXT = (FIXTURES / "vllm_bench_serve_qwen3_vl_8b_1qps.json").read_text()
BENCH = json.loads(BENCH_TEXT)
TARGET = {"gpu": "H100-SXM", "model": "Llama-3.1-8B"}
FORM = {**TARGET, "weight_dtype": "bf16", "kv_dtype": "auto", "tp": "1"}
LATENCY_SHAPE = {"batch_size": 8, "input_len": 512, "output_len": 128}
HARDWARE = {
    "schema_version": 1,
    "kind": "hardware_constants",
    "gpu": "H100-SXM",
    "hbm_bandwidth_bytes_per_s": 3e12,
    "gemm_flops": 7e14,
}
PYTHON_TEXT = re.compile(r"Traceback|(Key|Value|Type|Overflow)Error|<class '")


def _with_digits(digits: int) -> bytes:
    text = BENCH_TEXT.replace('"completed": 200', '"completed": ' + "1" * digits)
    assert text != BENCH_TEXT
    return text.encode()


def _upload(client: Client, content: bytes) -> Any:
    return client.post(
        "/capacity/calibrations/",
        {"file": SimpleUploadedFile("bench.json", content), **FORM},
    )


@pytest.mark.parametrize("digits", [310, 4300])
def test_the_upload_page_refuses_a_huge_integer_naming_field_and_cut_value(
    browser_client: Client, digits: int
) -> None:
    response = _upload(browser_client, _with_digits(digits))
    assert response.status_code == 200
    errors = response.context["errors"]
    said = (
        f"bench.json: completed='{'1' * 78}…: is an integer of {digits:,} "
        "digits; at most 20"
    )
    assert errors == [said]
    assert escape(said) in response.content.decode()
    assert not PYTHON_TEXT.search(response.content.decode())
    assert not Calibration.objects.exists()


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"completed": 1e30}, "results[0].completed=1e+30: must be at most 1e+12"),
        ({"completed": -200}, "results[0].completed=-200: must be a finite number > 0"),
        ({"duration": -203.5}, "results[0].duration=-203.5: must be a finite number"),
        ({"duration": 1e12}, "results[0].duration=1000000000000.0: must be at most"),
        ({"total_output_tokens": -1}, "results[0].total_output_tokens=-1: must be"),
        ({"total_input_tokens": 1e25}, "results[0].total_input_tokens=1e+25: must"),
        ({"median_ttft_ms": -95.7}, "results[0].median_ttft_ms=-95.7: must be"),
        ({"p99_itl_ms": -42.0}, "results[0].p99_itl_ms=-42.0: must be a finite number >= 0"),
        ({"p99_itl_ms": "42"}, "results[0].p99_itl_ms='42': must be a finite number"),
        ({"max_concurrency": -1}, "results[0].max_concurrency=-1: must be"),
        ({"request_rate": "fast"}, "results[0].request_rate='fast': must be"),
        ({"output_throughput": 1e300}, "results[0].output_throughput=1e+300: must be at"),
    ],
)  # fmt: skip
def test_the_command_refuses_an_absurd_bench_figure_naming_it(
    tmp_path: Any, changes: dict[str, Any], said: str
) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({**BENCH, **changes}))
    with pytest.raises(CommandError) as refused:
        call_command(
            "calibration_import",
            str(path),
            "--gpu",
            "H100-SXM",
            "--model",
            "Llama-3.1-8B",
        )
    assert str(refused.value).startswith("bench.json: ")
    assert said in str(refused.value)
    assert not Calibration.objects.exists()


@pytest.mark.parametrize(
    ("document", "target", "said"),
    [
        (
            {"avg_latency": 1.0, "latencies": [0.9, -1.0], "percentiles": {}},
            {**TARGET, **LATENCY_SHAPE},
            "latencies[1]=-1.0: must be a finite number > 0",
        ),
        (
            {"avg_latency": 1e30, "latencies": [1.0], "percentiles": {}},
            {**TARGET, **LATENCY_SHAPE},
            "avg_latency=1e+30: must be at most 1e+07",
        ),
        (
            {"avg_latency": 1.0, "latencies": ["1.0"], "percentiles": {}},
            {**TARGET, **LATENCY_SHAPE},
            "latencies[0]='1.0': must be a finite number > 0",
        ),
        (
            {"avg_latency": 1.0, "latencies": [1.0], "percentiles": {}},
            {**TARGET, **LATENCY_SHAPE, "output_len": 10**40},
            "output_len=10000000000000000000000000000000000000000: is not between",
        ),
        (BENCH, {**TARGET, "tp": 10**30}, "tp=1000000000000000000000000000000: is"),
        (BENCH, {**TARGET, "weight_dtype": "fp64"}, "weight_dtype='fp64': known:"),
        (
            {**HARDWARE, "gpu": "G" * 100},
            {},
            "key.gpu='GGGG",
        ),
        (
            {**HARDWARE, "note": "a\x00b"},
            {},
            "note='a\\x00b': contains a NUL character",
        ),
        (
            {**HARDWARE, "attention": [{"batch": 1, "context": -64, "seconds": 1}] * 3},
            {},
            "attention[0].context=-64: must be a finite number >= 0",
        ),
    ],
    ids=[
        "negative latency", "huge latency", "latency as text", "huge output_len",
        "huge tp", "unknown weight dtype", "gpu longer than its column",
        "NUL in a stored text", "negative attention context",
    ],
)  # fmt: skip
def test_the_service_refuses_what_no_page_sends(
    document: Any, target: dict[str, Any], said: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        services.calibration_import(
            content=json.dumps(document).encode(), filename="f.json", target=target
        )
    assert said in str(refused.value)
    assert len(str(refused.value)) < 300
    assert not Calibration.objects.exists()


def test_deep_json_from_the_command_line_is_refused_not_a_recursion_error(
    tmp_path: Any,
) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CommandError, match=r"file='deep.json': nested more than 20"):
        call_command("calibration_import", str(path))
    path.write_text('{"a": ' * 30 + "1" + "}" * 30)
    with pytest.raises(CommandError, match=r"nested more than 20 levels deep"):
        call_command("calibration_import", str(path))


def test_a_sound_bench_file_still_imports(browser_client: Client) -> None:
    response = _upload(browser_client, BENCH_TEXT.encode())
    assert response.status_code == 302
    assert Calibration.objects.count() == 1
