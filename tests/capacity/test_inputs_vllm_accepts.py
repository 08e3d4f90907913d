"""Capacity accepts what vLLM accepts and refuses what it refuses (issue 26):
float32 weights, typed numbers in JSON and YAML payloads, max_model_len up to
the model's derived maximum, and MIG slices from the GPU's own profiles."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from analytics.capacity.__main__ import EXIT_INVALID, EXIT_OK, main
from analytics.capacity.catalog import get_gpu, get_model, model_from_hf_config
from analytics.capacity.engine import Scenario, evaluate
from analytics.capacity.errors import Refused
from analytics.errors import InvalidInput
from costapp.catalog import mig_slices_per_gpu
from costapp.models import Deployment
from costapp.sources.engines import DeviceKey

LLAMA_8B = Scenario(model="Llama-3.1-8B", gpu="H100-SXM")


def _cli(document: dict, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    path = io.StringIO(json.dumps(document))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdin", path)
        code = main([])
    return code, json.loads(capsys.readouterr().out)


# ---- fp32 weights -----------------------------------------------------------


@pytest.mark.parametrize("spelling", ["fp32", "float32", "FP32"])
def test_float32_weights_take_four_bytes_a_parameter_and_a_float32_cache(
    spelling: str,
) -> None:
    bf16 = evaluate(LLAMA_8B)
    fp32 = evaluate(replace(LLAMA_8B, weight_dtype=spelling))
    assert fp32.weights_bytes == pytest.approx(2 * bf16.weights_bytes)
    # cache_dtype "auto" is the model's dtype: float32 KV is twice bf16's.
    assert fp32.kv_bytes_per_token == 2 * bf16.kv_bytes_per_token
    assert any("fp32 weights" in w for w in fp32.warnings)


def test_an_unknown_weight_format_is_still_refused_naming_the_known_ones() -> None:
    with pytest.raises(InvalidInput, match=r"weight_dtype='fp64'.*fp32.*float32"):
        evaluate(replace(LLAMA_8B, weight_dtype="fp64"))


# ---- numbers typed as text are refused ----------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gpu_memory_utilization", "0.9"),
        ("max_model_len", "8192"),
        ("tp", "2"),
        ("enforce_eager", "false"),  # would read as true if parsed
        ("gpu_memory_utilization", True),
    ],
)
def test_the_engine_refuses_a_number_given_as_text_naming_field_and_value(
    field: str, value: object
) -> None:
    with pytest.raises(InvalidInput) as caught:
        evaluate(replace(LLAMA_8B, **{field: value}))
    assert caught.value.field == field and caught.value.value == value


def test_the_cli_refuses_a_string_number_in_json_with_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = _cli(
        {"model": "Llama-3.1-8B", "gpu": "H100-SXM", "gpu_memory_utilization": "0.9"},
        capsys,
    )
    assert code == EXIT_INVALID
    assert (out["field"], out["value"]) == ("gpu_memory_utilization", "0.9")
    assert "gpu_memory_utilization='0.9': must be a number, not text" in out["message"]
    code, _ = _cli(
        {"model": "Llama-3.1-8B", "gpu": "H100-SXM", "gpu_memory_utilization": 0.9},
        capsys,
    )
    assert code == EXIT_OK


# ---- max_model_len above the derived maximum ---------------------------------


def test_max_model_len_above_the_derived_maximum_is_refused_as_vllm_refuses_it() -> (
    None
):
    derived = get_model("Llama-3.1-8B").max_position
    assert evaluate(replace(LLAMA_8B, max_model_len=derived)).starts
    with pytest.raises(Refused) as caught:
        evaluate(replace(LLAMA_8B, max_model_len=derived + 1))
    assert caught.value.field == "max_model_len"
    assert caught.value.value == derived + 1
    assert f"derived max_model_len (max_position_embeddings={derived}" in str(
        caught.value
    )


def test_the_derived_maximum_follows_yarn_rope_scaling() -> None:
    # Qwen2.5 with YaRN x4 over 32,768 positions: vLLM derives 131,072.
    qwen = model_from_hf_config(
        {
            "num_hidden_layers": 28,
            "hidden_size": 3584,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "intermediate_size": 18944,
            "max_position_embeddings": 32768,
            "rope_scaling": {
                "type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 32768,
            },
        },
        name="qwen-yarn",
    )
    assert qwen.max_position == 131072
    scenario = Scenario(model=qwen, gpu="H200", max_model_len=131072)
    assert evaluate(scenario).starts
    with pytest.raises(Refused, match=r"max_model_len=131073.*131072"):
        evaluate(replace(scenario, max_model_len=131073))


def test_the_cli_refuses_max_model_len_above_the_maximum_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = _cli(
        {"model": "Llama-3.1-8B", "gpu": "H100-SXM", "max_model_len": 10_000_000},
        capsys,
    )
    assert code == EXIT_INVALID
    assert out["refusal"] == "max_model_len_above_derived"
    assert (out["field"], out["value"]) == ("max_model_len", 10_000_000)
    assert "max_position_embeddings=131072" in out["message"]


@pytest.mark.django_db
def test_the_whatif_page_and_command_refuse_max_model_len_above_the_maximum(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.get("/capacity/chat/", {"a-max_model_len": "10000000"})
    variant = response.context["columns"][1]
    assert variant.result is None
    assert "max_model_len=10000000" in variant.error
    assert "max_position_embeddings=131072" in variant.error
    with pytest.raises(CommandError, match=r"max_model_len=10000000.*131072"):
        call_command(
            "capacity_whatif", "--deployment", "chat", "--set", "max_model_len=10000000"
        )


# ---- MIG slices from the GPU's own profiles ----------------------------------


@pytest.mark.parametrize(
    ("gpu", "slices"),
    [
        ("A30", 4),
        ("NVIDIA A30", 4),
        ("A100-80GB", 7),
        ("NVIDIA A100-SXM4-80GB", 7),
        ("NVIDIA H100 80GB HBM3", 7),
        ("L4", 7),  # no MIG: unused
        ("", 7),
    ],
)
def test_slices_per_gpu_come_from_the_gpus_own_mig_profiles(
    gpu: str, slices: int
) -> None:
    assert mig_slices_per_gpu(gpu) == slices


def test_an_a30_slice_is_a_quarter_of_the_gpu_an_h100_slice_a_seventh() -> None:
    a30 = DeviceKey("node", "GPU-1", "1", 0, "NVIDIA A30", "1g.6gb")
    h100 = DeviceKey("node", "GPU-2", "1", 0, "NVIDIA H100 80GB HBM3", "1g.10gb")
    assert a30.gpu_share == 0.25
    assert h100.gpu_share == pytest.approx(1 / 7)
    assert Deployment(gpu_type="A30", mig_profile="2g.12gb").gpu_share == 0.5


def test_the_engine_takes_a_slice_share_over_the_gpus_own_slices() -> None:
    assert get_gpu("H100-SXM").mig_slices == 7
    result = evaluate(replace(LLAMA_8B, mig_profile="3g.40gb"))
    assert result.gpu_share_per_replica == pytest.approx(3 / 7)
