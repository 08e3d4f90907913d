"""The admin's Deployment form shows the target utilisation and holds it to
the fleet file's rule: a share in (0, 1], refused with the field and value."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from costapp.fleet.fleetfile import fleet_load
from costapp.models import Deployment

pytestmark = [pytest.mark.django_db]

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "fleet.example.yaml"


def _post_data(dep: Deployment, **changes: str) -> dict[str, str]:
    data = {
        "name": dep.name,
        "team": dep.team,
        "engine": dep.engine,
        "engine_version": dep.engine_version,
        "model_name": dep.model_name,
        "gpu_type": dep.gpu_type,
        "gpu_count": str(dep.gpu_count),
        "tensor_parallel_size": str(dep.tensor_parallel_size),
        "mig_profile": dep.mig_profile,
        "instance_type": dep.instance_type,
        "region": dep.region,
        "account_id": dep.account_id,
        "prometheus_selector": dep.prometheus_selector,
        "dcgm_selector": dep.dcgm_selector,
        "cost_rules": "[]",
        "pool": str(dep.pool_id or ""),
        "slo_ttft_p95_ms": ""
        if dep.slo_ttft_p95_ms is None
        else str(dep.slo_ttft_p95_ms),
        "slo_itl_p95_ms": "" if dep.slo_itl_p95_ms is None else str(dep.slo_itl_p95_ms),
        "target_utilisation": str(dep.target_utilisation),
    }
    data.update(changes)
    return data


@pytest.fixture
def chat(db: None) -> Deployment:
    """chat as docs/fleet.example.yaml declares it."""
    fleet_load(path=EXAMPLE)
    return Deployment.objects.get(name="chat")


def _save(admin_client: Any, dep: Deployment, target_utilisation: str) -> Any:
    """The change form posted with everything as stored but the target."""
    url = f"/admin/costapp/deployment/{dep.pk}/change/"
    return admin_client.post(
        url, _post_data(dep, target_utilisation=target_utilisation)
    )


def _errors(content: bytes) -> list[str]:
    text = unescape(content.decode())
    return [re.sub(r"<[^>]+>", "", li).strip()
            for li in re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', text, re.S)]  # fmt: skip


def test_the_change_page_shows_the_target_utilisation(
    admin_client: Any, chat: Deployment
) -> None:
    page = admin_client.get(f"/admin/costapp/deployment/{chat.pk}/change/")
    assert page.status_code == 200
    field = re.search(rb'<input[^>]*name="target_utilisation"[^>]*>', page.content)
    assert field is not None
    assert f'value="{chat.target_utilisation}"'.encode() in field.group(0)


@pytest.mark.parametrize("value", ["0", "-0.2", "1.5", "70"])
def test_a_target_utilisation_outside_0_to_1_is_refused_naming_field_and_value(
    admin_client: Any, chat: Deployment, value: str
) -> None:
    before = chat.target_utilisation
    response = _save(admin_client, chat, value)
    assert response.status_code == 200  # the form again, with the error
    shown = repr(float(value))
    assert f"target_utilisation {shown} must be a number in (0, 1]" in " ".join(
        _errors(response.content)
    )
    chat.refresh_from_db()
    assert chat.target_utilisation == before


@pytest.mark.parametrize("value", ["nan", "inf", "seventy", ""])
def test_a_target_utilisation_that_is_no_number_is_refused(
    admin_client: Any, chat: Deployment, value: str
) -> None:
    response = _save(admin_client, chat, value)
    assert response.status_code == 200
    assert _errors(response.content)
    chat.refresh_from_db()
    assert chat.target_utilisation == 0.7


@pytest.mark.parametrize("value", ["1", "0.55", "0.01"])
def test_a_target_utilisation_in_0_to_1_is_saved(
    admin_client: Any, chat: Deployment, value: str
) -> None:
    response = _save(admin_client, chat, value)
    assert response.status_code == 302, _errors(response.content)
    chat.refresh_from_db()
    assert chat.target_utilisation == float(value)
