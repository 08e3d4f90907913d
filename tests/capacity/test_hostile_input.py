"""Every capacity page as each role and as an attacker: a permission is checked
on every view, every absurd value is refused naming the field and the value
(never a 500, never Python's own text), and a figure that cannot be computed
shows as missing, not as 0."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from costapp.formatting import MISSING
from costapp.models import Calibration, Deployment, Scenario
from tests.support.users import user_in

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]

PAGES = (
    "/capacity/",
    "/capacity/chat/",
    "/capacity/mig/",
    "/capacity/search/",
    "/capacity/calibrations/",
    "/capacity/scenarios/",
)
WRITES = ("/capacity/chat/fit", "/capacity/chat/save", "/capacity/calibrations/")
ABSURD = (
    "-1",
    "1e308",
    "1e309",
    "NaN",
    "inf",
    "-Infinity",
    "1_000",
    "\uff11\uff12",  # full-width 12
    "\u0661\u0662",  # Arabic-Indic 12
    "1" * 5000,
    "x" * 5000,
    "a\x00b",
    "ünï",
    "",
)
# Python's own words in a page mean an exception's text reached the user.
PYTHON_TEXT = re.compile(
    r"Traceback|(Key|Value|Type|Attribute|Overflow|ZeroDivision)Error|"
    r"numpy\.|np\.float|<class '"
)


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _clean(response) -> str:  # type: ignore[no-untyped-def]
    assert response.status_code < 500
    body = response.content.decode()
    assert not PYTHON_TEXT.search(body), PYTHON_TEXT.search(body)
    return body


def test_finance_and_a_user_without_roles_are_refused_every_capacity_page(
    chat: Deployment,
) -> None:
    shared = Scenario.objects.create(
        name="s", deployment=chat, inputs={"query": ""}, result={}
    )
    token_pages = (f"/capacity/s/{shared.share_token}/", f"{shared.share_token}/csv")
    for user in (user_in("fin", "finance"), User.objects.create_user("nobody")):
        client = _client(user)
        for url in PAGES + token_pages[:1]:
            assert client.get(url).status_code == 403, (user, url)
        assert client.get(f"/capacity/s/{shared.share_token}/csv").status_code == 403
        for url in WRITES:
            assert client.post(url, {"name": "x"}).status_code == 403, (user, url)
    assert Calibration.objects.count() == 0 and Scenario.objects.count() == 1
    anonymous = Client()
    for url in PAGES:
        page = anonymous.get(url)
        assert page.status_code == 302 and page["Location"].startswith("/login/")


def test_a_tech_lead_and_an_admin_open_every_capacity_page(chat: Deployment) -> None:
    for user in (user_in("lee", "tech lead"), user_in("ada", "admin")):
        client = _client(user)
        for url in PAGES:
            _clean(client.get(url))


@pytest.mark.parametrize("value", ABSURD, ids=range(len(ABSURD)))
@pytest.mark.parametrize(
    "field",
    [
        "max_model_len",
        "max_num_seqs",
        "gpu_memory_utilization",
        "target_requests_per_s",
        "itl_sla_ms",
        "tp",
        "gpu",
        "engine_version",
    ],
)
def test_an_absurd_what_if_value_is_refused_naming_the_field_and_value(
    chat: Deployment, field: str, value: str
) -> None:
    client = _client(user_in("lee", "tech lead"))
    page = client.get("/capacity/chat/", {f"a-{field}": value})
    _clean(page)
    if value == "":
        assert page.context["errors"] == []  # blank keeps today's value
        return
    errors = page.context["errors"]
    assert len(errors) == 1, errors
    assert f"({field}) = " in errors[0] and repr(value)[:40] in errors[0]


@pytest.mark.parametrize("value", ABSURD[:-1], ids=range(len(ABSURD) - 1))
def test_an_absurd_search_choice_is_refused_before_the_engine_runs(
    chat: Deployment, value: str
) -> None:
    client = _client(user_in("lee", "tech lead"))
    for field in ("max_num_seqs", "gpu_memory_utilization", "block_size", "gpu"):
        page = client.get(
            "/capacity/search/",
            {
                "deployment": "chat",
                "objective": "cost_per_1k_requests",
                f"space_{field}": f"16,{value}",
            },
        )
        _clean(page)
        assert page.context["outcome"] is None, (field, value)
        errors = page.context["errors"]
        assert len(errors) == 1, errors
        assert f"(space_{field}) = " in errors[0]
        # The choice itself is quoted unless the whole field was refused.
        assert f"(in {field})" in errors[0] or len(value) > 400 or "\x00" in value


def test_search_takes_the_what_ifs_bounds_not_just_a_type(chat: Deployment) -> None:
    """Before, '-1' and '1e308' reached the engine and the whole search was
    dropped with one problem line; 1_000 and full-width digits passed int()."""
    client = _client(user_in("lee", "tech lead"))
    for raw, reason in (
        ("-1", "greater than or equal to 1"),
        ("1_000", "plain number such as 64"),
        ("\uff11\uff12", "plain number such as 64"),
    ):
        page = client.get(
            "/capacity/search/",
            {
                "deployment": "chat",
                "objective": "cost_per_1k_requests",
                "space_max_num_seqs": raw,
            },
        )
        (error,) = page.context["errors"]
        assert error.startswith(
            f"max_num_seqs (space_max_num_seqs) = {raw!r}: {raw!r} (in max_num_seqs)"
        )
        assert reason in error
    page = client.get(
        "/capacity/search/",
        {
            "deployment": "chat",
            "objective": "cost_per_1k_requests",
            "space_max_num_seqs": "64,128",
            "space_mig_profile": "none",
        },
    )
    assert page.context["errors"] == [] and page.context["ranked_count"] == 2


@pytest.mark.parametrize("layouts", ["0x1g", "8x1g", "99x1g", "1g+" * 8 + "1g"])
def test_a_mig_layout_with_no_or_too_many_instances_is_refused_in_the_form(
    chat: Deployment, layouts: str
) -> None:
    client = _client(user_in("lee", "tech lead"))
    page = client.get(
        "/capacity/mig/",
        {"gpu": "H100-SXM", "layouts": layouts, "deployments": "chat"},
    )
    _clean(page)
    (error,) = page.context["errors"]
    assert error.startswith("layouts (layouts) = ") and "instances" in error
    assert page.context["rows"] == []


def test_a_share_token_that_cannot_be_one_is_not_found_not_a_500(
    chat: Deployment,
) -> None:
    client = _client(user_in("lee", "tech lead"))
    for token in ("a\x00b", "ünï", "x" * 5000, "..", "a b"):
        assert client.get(f"/capacity/s/{token}/").status_code == 404, token
        assert client.get(f"/capacity/s/{token}/csv").status_code == 404, token


def test_an_unknown_simulate_column_is_named_and_cut_to_a_readable_length(
    chat: Deployment,
) -> None:
    client = _client(user_in("lee", "tech lead"))
    page = client.get("/capacity/chat/", {"simulate": "z" * 5000})
    text = _clean(page) and page.context["simulation_error"]
    assert text.startswith("simulate='zzz") and len(text) < 200


def test_a_column_that_cannot_serve_shows_replicas_and_gpus_as_missing(
    chat: Deployment,
) -> None:
    """No KV memory at 5% utilisation: the engine holds 0 replicas and 0 GPUs,
    which would read as "needs none"; the page shows them as missing."""
    client = _client(user_in("lee", "tech lead"))
    page = client.get(
        "/capacity/chat/",
        {"a-gpu_memory_utilization": "0.05", "a-target_requests_per_s": "5"},
    )
    _clean(page)
    column = page.context["columns"][1]
    assert column.result is not None and not column.result.feasible
    assert column.result.replicas == 0  # the engine's placeholder
    rows = {metric.field: cells for metric, cells in page.context["whatif"].rows}
    assert rows["replicas"][1].text == MISSING
    assert rows["gpus_needed"][1].text == MISSING
    assert rows["replicas"][0].text not in (MISSING, "0")  # today serves


def test_an_absurd_calibration_upload_field_is_refused_naming_it(
    chat: Deployment,
) -> None:
    client = _client(user_in("lee", "tech lead"))
    for field, value in (
        ("tp", "1e308"),
        ("batch_size", "1" * 30),
        ("input_len", "\uff11"),
        ("engine_version", "a\x00b"),
        ("gpu", "ünï"),
    ):
        upload = SimpleUploadedFile("c.json", b"{}", content_type="application/json")
        page = client.post("/capacity/calibrations/", {"file": upload, field: value})
        _clean(page)
        errors = page.context["errors"]
        assert any(f"({field}) = " in e for e in errors), (field, errors)
    assert Calibration.objects.count() == 0


def test_a_simulation_percentile_of_no_samples_is_missing_not_nan_ms() -> None:
    from analytics.capacity.simulate import SimulationResult
    from costapp.capacity.tables import simulation_rows

    nan = float("nan")
    result = SimulationResult(
        requests_completed=0, duration_s=10.0, throughput_tokens_per_s=0.0,
        requests_per_s=0.0, ttft_p50_ms=40.0, ttft_p95_ms=nan, ttft_p99_ms=nan,
        itl_mean_ms=nan, itl_p50_ms=nan, itl_p95_ms=nan, itl_p99_ms=nan,
        e2e_p50_ms=nan, e2e_p95_ms=nan, preemptions=0, mean_running_batch=0.0,
        steps=0,
    )  # fmt: skip
    rows = dict(simulation_rows(result))
    assert rows["TTFT"] == ["40.0 ms", MISSING, MISSING]
    assert rows["End to end"] == [MISSING, MISSING, MISSING]


def test_the_simulated_column_shows_its_end_to_end_p99(chat: Deployment) -> None:
    client = _client(user_in("lee", "tech lead"))
    page = client.get("/capacity/chat/", {"simulate": "today"})
    rows = dict(_clean(page) and page.context["simulation_rows"])
    _, p95, p99 = rows["End to end"]
    assert p99 != MISSING and p99.endswith(" ms")
    assert float(p95[:-3].replace(",", "")) <= float(p99[:-3].replace(",", ""))
