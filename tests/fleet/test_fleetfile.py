from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from costapp.fleet.fleetfile import fleet_load
from costapp.fleet.forms import DeploymentForm
from costapp.fleet.validation import SelectorError, pool_problems, selector_parse
from costapp.models import Deployment, Pool
from costapp.yamlfile import FileProblems

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "fleet.example.yaml"


def _fleet() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _snapshot() -> tuple[list, list]:
    return (
        list(Deployment.objects.order_by("name").values()),
        list(Pool.objects.order_by("name").values()),
    )


def _refused(tmp_path: Path, data: dict) -> str:
    fleet_load(path=EXAMPLE)
    before = _snapshot()
    with pytest.raises(FileProblems) as info:
        fleet_load(path=_write(tmp_path, data))
    assert _snapshot() == before, "a refused file changed the database"
    return str(info.value)


def _index(data: dict, name: str) -> int:
    return next(i for i, d in enumerate(data["deployments"]) if d["name"] == name)


def test_the_example_fleet_file_loads() -> None:
    result = fleet_load(path=EXAMPLE)
    assert sorted(result.created) == [
        "chat",
        "classify",
        "code-assist",
        "moderation",
        "summarize",
    ]
    chat = Deployment.objects.get(name="chat")
    assert chat.pool is not None and chat.pool.name == "p5-chat"
    assert chat.tensor_parallel_size == 4 and chat.slo_itl_p95_ms == 60
    assert Deployment.objects.get(name="code-assist").gpu_share == pytest.approx(3 / 7)
    assert chat.dcgm_selector == 'namespace="assistant",pod=~"chat-.*"'


def test_loading_twice_is_idempotent() -> None:
    fleet_load(path=EXAMPLE)
    before = _snapshot()
    result = fleet_load(path=EXAMPLE)
    assert result.created == [] and result.updated == []
    assert len(result.unchanged) == 5
    assert _snapshot() == before


def test_it_refuses_an_unknown_gpu_type_naming_file_entry_and_field(
    tmp_path: Path,
) -> None:
    data = _fleet()
    i = _index(data, "summarize")
    data["deployments"][i]["gpu_type"] = "H300"
    message = _refused(tmp_path, data)
    assert f"fleet.yaml: deployments[{i}] (summarize): gpu_type 'H300'" in message
    assert "is not a known GPU type (known: A100-40GB" in message


def test_it_refuses_a_mig_profile_the_gpu_does_not_offer(tmp_path: Path) -> None:
    data = _fleet()
    i = _index(data, "code-assist")
    data["deployments"][i]["mig_profile"] = "3g.71gb"
    message = _refused(tmp_path, data)
    assert f"deployments[{i}] (code-assist): mig_profile '3g.71gb'" in message
    assert "is not a MIG profile of A100-80GB" in message


def test_it_refuses_tp_across_mig_instances(tmp_path: Path) -> None:
    data = _fleet()
    i = _index(data, "code-assist")
    data["deployments"][i]["tensor_parallel_size"] = 2
    data["deployments"][i]["gpu_count"] = 2
    message = _refused(tmp_path, data)
    assert f"deployments[{i}] (code-assist): tensor_parallel_size 2" in message
    assert "across MIG instances is not possible" in message


def test_it_refuses_a_duplicate_deployment_name(tmp_path: Path) -> None:
    data = _fleet()
    data["deployments"].append(dict(data["deployments"][0]))
    n = len(data["deployments"]) - 1
    message = _refused(tmp_path, data)
    assert f"deployments[{n}] (chat): name 'chat' is a duplicate of deployments[0]" in (
        message
    )


def test_it_refuses_an_unknown_pool(tmp_path: Path) -> None:
    data = _fleet()
    data["deployments"][0]["pool"] = "p6-pool"
    message = _refused(tmp_path, data)
    assert "deployments[0] (chat): pool 'p6-pool' is not a pool of this fleet" in (
        message
    )


@pytest.mark.parametrize(
    "selector, why",
    [
        ('namespace="chat', "unterminated string"),
        ("namespace=chat", "must be double-quoted"),
        ('1abc="x"', "expected a label name"),
        ('app=="x"', "must be double-quoted"),
        ('app=~"(unclosed"', "does not compile"),
        ('app="x" job="y"', "expected ','"),
        ('app="bad\\q"', "bad escape"),
    ],
)
@pytest.mark.parametrize("field", ["prometheus_selector", "dcgm_selector"])
def test_it_refuses_a_malformed_label_selector(
    tmp_path: Path, selector: str, why: str, field: str
) -> None:
    data = _fleet()
    data["deployments"][0][field] = selector
    message = _refused(tmp_path, data)
    assert f"deployments[0] (chat): {field}" in message
    assert why in message


@pytest.mark.parametrize(
    "rule, why",
    [
        ({"tag": {"key": "team"}}, "tag needs a non-empty 'key' and 'value'"),
        ({"label": "x"}, "unknown rule 'label'"),
        ({"usage_type": ""}, "usage_type must be a non-empty string"),
        ({"tag": {"key": "a", "value": "b"}, "usage_type": "u"}, "exactly one of"),
    ],
)
def test_it_refuses_a_bad_cost_rule(tmp_path: Path, rule: dict, why: str) -> None:
    data = _fleet()
    i = _index(data, "summarize")
    data["deployments"][i]["cost_rules"] = [rule]
    message = _refused(tmp_path, data)
    assert f"deployments[{i}] (summarize): cost_rules[0] " in message
    assert why in message


def test_it_lists_every_mistake_at_once(tmp_path: Path) -> None:
    data = _fleet()
    data["deployments"][0]["gpu_type"] = "H300"
    data["deployments"][1]["engine"] = "triton"
    data["pools"][0]["allocation_key"] = "vibes"
    with pytest.raises(FileProblems) as info:
        fleet_load(path=_write(tmp_path, data))
    assert len(info.value.problems) == 3
    assert Deployment.objects.count() == 0 and Pool.objects.count() == 0


def test_it_reports_deployments_missing_from_the_file_and_prunes_on_request(
    tmp_path: Path,
) -> None:
    fleet_load(path=EXAMPLE)
    data = _fleet()
    data["deployments"] = [d for d in data["deployments"] if d["name"] != "classify"]
    path = _write(tmp_path, data)
    result = fleet_load(path=path)
    assert result.missing == ["classify"]
    assert Deployment.objects.filter(name="classify").exists()
    result = fleet_load(path=path, prune=True)
    assert result.pruned == ["classify"]
    assert not Deployment.objects.filter(name="classify").exists()


def test_the_command_fails_with_the_problems_and_succeeds_on_a_good_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _fleet()
    data["deployments"][0]["gpu_type"] = "H300"
    with pytest.raises(CommandError, match="gpu_type 'H300'"):
        call_command("fleet_load", str(_write(tmp_path, data)))
    call_command("fleet_load", str(EXAMPLE))
    assert "created: chat" in capsys.readouterr().out


def test_the_selector_parser_reads_escapes_and_all_four_operators() -> None:
    matchers = selector_parse('a="x\\"y", b!="z", c=~"code-(a|b)", d!~"canary.*",')
    assert [(m.label, m.op, m.value) for m in matchers] == [
        ("a", "=", 'x"y'),
        ("b", "!=", "z"),
        ("c", "=~", "code-(a|b)"),
        ("d", "!~", "canary.*"),
    ]
    assert selector_parse("") == []
    with pytest.raises(SelectorError):
        selector_parse(",")


def test_the_admin_form_applies_the_fleet_file_rules() -> None:
    fleet_load(path=EXAMPLE)
    chat = Deployment.objects.get(name="code-assist")
    form = DeploymentForm(
        data={
            "name": "code-assist",
            "team": "devtools",
            "engine": "vllm",
            "model_name": "Qwen/Qwen2.5-Coder-7B-Instruct",
            "gpu_type": "A100-80GB",
            "gpu_count": 2,
            "tensor_parallel_size": 2,
            "mig_profile": "3g.40gb",
            "region": "us-east-1",
            "prometheus_selector": 'app="x',
            "cost_rules": "[]",
            "pool": chat.pool_id,
        },
        instance=chat,
    )
    assert not form.is_valid()
    assert "across MIG instances" in str(form.errors["tensor_parallel_size"])
    assert "unterminated" in str(form.errors["prometheus_selector"])


def test_the_admin_refuses_tp_across_mig_instances(admin_client) -> None:  # type: ignore[no-untyped-def]
    fleet_load(path=EXAMPLE)
    dep = Deployment.objects.get(name="code-assist")
    url = f"/admin/costapp/deployment/{dep.pk}/change/"
    assert admin_client.get(url).status_code == 200
    form = {
        "name": "code-assist",
        "team": "devtools",
        "engine": "vllm",
        "engine_version": "0.10.1",
        "model_name": dep.model_name,
        "gpu_type": "A100-80GB",
        "gpu_count": "2",
        "tensor_parallel_size": "2",
        "mig_profile": "3g.40gb",
        "instance_type": "p4de.24xlarge",
        "region": "us-east-1",
        "account_id": "",
        "prometheus_selector": 'app="code-assist"',
        "cost_rules": "[]",
        "pool": str(dep.pool_id),
        "slo_ttft_p95_ms": "",
        "slo_itl_p95_ms": "",
    }
    response = admin_client.post(url, form)
    assert response.status_code == 200  # the form again, with the error
    assert b"across MIG instances is not possible" in response.content
    dep.refresh_from_db()
    assert dep.tensor_parallel_size == 1


def test_a_pool_may_declare_shared_overheads_and_a_bad_one_is_named() -> None:
    good = {
        "name": "p5",
        "instance_type": "p5.48xlarge",
        "gpu_type": "H100-SXM",
        "cost_rules": [
            {"usage_type": "BoxUsage:p5.48xlarge"},
            {"overhead": {"usage_type": "DataTransfer-Out-Bytes"}, "key": "requests"},
        ],
    }
    assert pool_problems(good) == []
    bad = dict(good, cost_rules=[{"overhead": {"colour": "x"}, "key": "vibes"}])
    fields = [field for field, _ in pool_problems(bad)]
    assert fields == ["cost_rules[0].overhead", "cost_rules[0].key"]


def test_declared_serving_arguments_load_as_written() -> None:
    fleet_load(path=EXAMPLE)
    chat = Deployment.objects.get(name="chat")
    assert chat.serving_args == {"max_model_len": 32768, "max_num_seqs": 256}
    assert Deployment.objects.get(name="summarize").serving_args == {}


@pytest.mark.parametrize(
    "serving, field, why",
    [
        ({"max_model_len": "8192"}, "serving.max_model_len", "must be a whole number"),
        ({"max_model_len": 8192.5}, "serving.max_model_len", "must be a whole number"),
        ({"max_num_seqs": True}, "serving.max_num_seqs", "must be a whole number"),
        ({"max_model_len": 8}, "serving.max_model_len", "between 16 and"),
        ({"gpu_memory_utilization": "0.9"}, "serving.gpu_memory_utilization", "(0, 1]"),
        ({"gpu_memory_utilization": 90}, "serving.gpu_memory_utilization", "(0, 1]"),
        ({"kv_cache_dtype": "fp4"}, "serving.kv_cache_dtype", "is not one of auto"),
        ({"enforce_eager": "yes"}, "serving.enforce_eager", "true or false"),
        (
            {"max-model-len": 8192},
            "serving.max-model-len",
            "did you mean max_model_len",
        ),
        ([8192], "serving", "must be a mapping"),
    ],
)
def test_a_serving_argument_of_the_wrong_type_or_name_is_refused_naming_it(
    tmp_path: Path, serving: object, field: str, why: str
) -> None:
    data = _fleet()
    i = _index(data, "summarize")
    data["deployments"][i]["serving"] = serving
    message = _refused(tmp_path, data)
    assert f"deployments[{i}] (summarize): {field} " in message
    assert why in message
