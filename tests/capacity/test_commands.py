from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from costapp.models import Calibration, Deployment
from tests.capacity.conftest import FIXTURES

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def test_capacity_whatif_outputs_json_with_today_variant_and_deltas(
    chat: Deployment,
) -> None:
    out = io.StringIO()
    call_command(
        "capacity_whatif",
        "--deployment",
        "chat",
        "--set",
        "kv_cache_dtype=fp8",
        "--set",
        "max_model_len=8192",
        "--json",
        stdout=out,
    )
    doc = json.loads(out.getvalue())
    assert doc["today"]["kv_bytes_per_token"] == 131072
    assert doc["variant"]["kv_bytes_per_token"] == 65536
    assert doc["deltas"]["kv_bytes_per_token"] == -65536
    assert doc["variant"]["overrides"] == {"kv_dtype": "fp8", "max_model_len": 8192}
    assert doc["today"]["calibration"]["label"] == "roofline, uncalibrated"
    for name in (
        "num_gpu_blocks",
        "kv_cache_tokens",
        "max_concurrency",
        "decode_step_ms",
        "throughput_tokens_per_s",
        "max_requests_per_s_within_sla",
        "gpus_needed",
        "cost_per_1k_requests",
        "cost_per_1m_tokens",
    ):
        assert name in doc["variant"]


def test_capacity_whatif_prints_a_table_without_json(chat: Deployment) -> None:
    out = io.StringIO()
    call_command("capacity_whatif", "--deployment", "chat", "--set", "tp=2", stdout=out)
    assert "KV bytes per token" in out.getvalue()
    assert "calibration roofline, uncalibrated" in out.getvalue()


def test_capacity_whatif_refuses_a_bad_value_naming_it(chat: Deployment) -> None:
    with pytest.raises(CommandError, match=r"max_model_len.*'many'"):
        call_command(
            "capacity_whatif",
            "--deployment",
            "chat",
            "--set",
            "max_model_len=many",
            "--json",
        )
    with pytest.raises(CommandError, match="colour"):
        call_command("capacity_whatif", "--deployment", "chat", "--set", "colour=red")


def test_calibration_import_command_stores_a_bench_file_and_refuses_a_bad_one(
    db,
) -> None:
    out = io.StringIO()
    call_command(
        "calibration_import",
        str(FIXTURES / "vllm_bench_serve_qwen3_vl_8b_1qps.json"),
        "--gpu",
        "L40S",
        "--model",
        "Qwen3-8B",
        stdout=out,
    )
    assert "imported calibration" in out.getvalue()
    assert Calibration.objects.get().gpu_type == "L40S"
    with pytest.raises(CommandError, match=r"params\.bw_eff_bytes_per_s.*-3"):
        call_command(
            "calibration_import", str(FIXTURES / "calibration_negative_bandwidth.json")
        )
    assert Calibration.objects.count() == 1
