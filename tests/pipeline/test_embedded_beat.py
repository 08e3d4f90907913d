"""The embedded demo has no beat process and no broker: the same schedule
runs on a thread of the serving process, so a rule made on the alerts page is
evaluated without anyone typing a command."""

from __future__ import annotations

import threading
import time

import pytest

from costapp.celery import beat_in_process
from costapp.models import AlertRule, AlertRuleEvaluated, PipelineStep

pytestmark = [pytest.mark.smoke]


def test_a_rule_made_in_the_ui_is_evaluated_by_the_in_process_beat(
    transactional_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COSTAPP_SCHEDULE_ALERTS_EVALUATE_S", "5")
    rule = AlertRule.objects.create(
        name="made in the UI", metric="cost_per_1k_requests", grain="hour", ratio=1.2
    )
    stop = threading.Event()
    beat = threading.Thread(target=beat_in_process, args=(stop,), daemon=True)
    beat.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if AlertRuleEvaluated.objects.filter(rule=rule).exists():
                break
            time.sleep(0.2)
    finally:
        stop.set()
        beat.join(10)
    assert AlertRuleEvaluated.objects.filter(rule=rule).exists()
    # Through the pipeline's alerts step, as under compose.
    assert PipelineStep.objects.get(name="alerts").consumed >= 1
