"""The benchmarks still run (tiny sizes; the real runs are not CI's job)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import bench_anomalies, bench_forecast, bench_unit_costs
from bench.anomaly_series import generate

ROOT = Path(__file__).resolve().parents[2]


def _main(
    module: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", "--smoke"])  # type: ignore[attr-defined]
    assert module.main() == 0  # type: ignore[attr-defined]
    return capsys.readouterr().out


def test_the_generator_is_deterministic_and_labels_only_injections() -> None:
    a, b = generate(5, n_series=3, n_days=91), generate(5, n_series=3, n_days=91)
    assert a.equals(b)
    assert set(a.loc[a["label"] == 1, "kind"]) <= {"step", "spike", "hidden"}
    assert (a.loc[a["label"] == 0, "kind"] == "").all()


def test_the_anomaly_benchmark_scores_both_rules(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _main(bench_anomalies, monkeypatch, capsys)
    assert "| costapp" in out and "| fixed" in out


def test_the_speed_benchmark_reports_a_ratio(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _main(bench_unit_costs, monkeypatch, capsys)
    assert "x |" in out


def test_the_forecast_backtest_reports_mape_and_coverage(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _main(bench_forecast, monkeypatch, capsys)
    assert "coverage" in out
