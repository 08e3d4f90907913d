"""The what-if page's back-test and rejected share on the seeded chat (not the
demo: nothing here is circular)."""

from __future__ import annotations

import pytest
from django.test import Client

from costapp.models import Calibration, Deployment
from tests.capacity.seed_demo import declare_itl_curve, seed_prompt_histogram

pytestmark = [pytest.mark.django_db, pytest.mark.smoke]


def _rejected(response) -> dict[str, tuple[str, str]]:  # type: ignore[no-untyped-def]
    return {c.key: cell for c, cell in response.context["rejected"]}


def test_the_rejected_share_is_bounded_by_the_bucket_edges_per_column(
    chat: Deployment, browser_client: Client
) -> None:
    seed_prompt_histogram(chat)
    response = browser_client.get(
        "/capacity/chat/", {"a-max_model_len": "8192", "b-max_model_len": "16"}
    )
    assert response.status_code == 200
    cells = _rejected(response)
    # Today: the model's 131,072 tokens, above every bucket but +Inf (empty).
    assert cells["today"] == ("none (max_model_len 131,072)", "")
    # 8192 lies in (5000, 10000]: at least the 0.5% above 10,000, at most the
    # 2.5% above 5,000. Truncation: prompt + 200 output > 8192 means a prompt
    # over 7,992, the same bucket: 0% to 2.5% - 0.5% = 2.0% more.
    text, tone = cells["a"]
    assert "at least 0.5%, at most 2.5% of requests rejected" in text
    assert "a further 0.0% to 2.0% cut at max_model_len" in text
    assert tone == "bad"
    # 16 tokens: every prompt but those in (0, 100] surely (98%), at most all.
    assert "at least 98.0%, at most 100.0%" in cells["b"][0]
    assert b"rejects" in response.content


def test_without_a_prompt_histogram_the_share_is_unknown_not_zero(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.get("/capacity/chat/", {"a-max_model_len": "16"})
    cells = _rejected(response)
    assert cells["a"] == ("no prompt-length histogram", "muted")


def test_the_page_shows_observed_beside_predicted_and_the_fit_removes_the_error(
    chat: Deployment, browser_client: Client
) -> None:
    declare_itl_curve(chat, 1.3)
    response = browser_client.get("/capacity/chat/")
    html = response.content.decode()
    assert "Large error" in html and "Fit from telemetry" in html
    rows = {r.figure: r for r in response.context["backtest_rows"]}
    itl = rows["Mean ITL at the hourly mean batch"]
    # Observed = 1.3 x predicted at every hour, so the error is 1/1.3 - 1.
    observed, predicted = (float(v.split()[0]) for v in (itl.observed, itl.predicted))
    assert predicted / observed - 1 == pytest.approx(1 / 1.3 - 1, abs=0.005)
    assert itl.gap == "-23.1%" and itl.tone == "bad"
    assert rows["Output tokens/s per replica at that batch"].gap == "+30.0%"
    blocks = rows["KV blocks (num_gpu_blocks)"]
    assert "circular" not in blocks.note
    assert "circular" not in response.context["whatif"].blocks_check
    fitted = browser_client.post("/capacity/chat/fit")
    assert fitted.status_code == 302
    row = Calibration.objects.get()
    assert (row.kind, row.gpu_type, row.model_name) == (
        "telemetry_fit",
        "H100-SXM",
        "Llama-3.1-8B",
    )
    again = browser_client.get("/capacity/chat/")
    assert "Large error" not in again.content.decode()
    rows = {r.figure: r for r in again.context["backtest_rows"]}
    assert abs(float(rows["Mean ITL at the hourly mean batch"].gap[:-1])) < 10
    today = again.context["columns"][0]
    assert today.result.calibration.kind == "engine_measurements"


def test_a_fit_without_itl_telemetry_is_refused_naming_why_and_stores_nothing(
    chat: Deployment, browser_client: Client
) -> None:
    response = browser_client.post("/capacity/chat/fit", follow=True)
    assert response.status_code == 200
    text = " ".join(str(m) for m in response.context["messages"])
    assert "Fit from telemetry refused" in text and "telemetry.rows" in text
    assert Calibration.objects.count() == 0
    assert "nothing to compare" in response.content.decode()


def test_replicas_over_what_met_the_sla_are_named_not_averaged_away() -> None:
    from analytics.capacity.backtest import Backtest, HourCheck
    from costapp.capacity.backtest import DeploymentBacktest
    from costapp.capacity.backtest_tables import backtest_notes, backtest_rows

    def hour(at: str, observed: float, predicted: int) -> HourCheck:
        return HourCheck(
            at, 4.0, 30.0, 30.0, 0.0, 100.0, 100.0, 0.0, observed, predicted,
            True, "within" if predicted <= observed else "over",
            observed - predicted,
        )  # fmt: skip

    hours = (
        hour("2026-11-24T19:00:00+00:00", 14, 17),
        hour("2026-11-24T20:00:00+00:00", 15, 16),
        hour("2026-11-25T03:00:00+00:00", 5, 4),
    )
    bt = Backtest(
        hours, 0.0, 0.0, 0.0, 0.0, False, False, False, False, "roofline",
        ("2026-11-24T19:00:00+00:00: predicted 17 replicas where 14 met the ITL SLA",
         "a note that stays"),
    )  # fmt: skip
    found = DeploymentBacktest(Deployment(name="x"), None, bt, (), None, 7, frozenset())
    rows = backtest_rows(
        found, observed_blocks=None, predicted_blocks=None, large_error=0.15
    )
    replicas = {r.figure: r for r in rows}[
        "Replicas, hours that met the ITL SLA (one-sided)"
    ]
    assert (replicas.observed, replicas.predicted) == ("14.0 met the SLA", "17 needed")
    assert replicas.gap == "3.0 more than met it" and replicas.tone == "bad"
    assert "Tue 24 Nov 19:00 UTC; 2 of 3 hours over" in replicas.note
    assert backtest_notes(found) == ["a note that stays"]
