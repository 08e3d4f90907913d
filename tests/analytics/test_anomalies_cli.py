from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analytics.anomalies import NOTE_NO_GPU, detect, main
from analytics.baselines import BaselineConfig

ROOT = Path(__file__).resolve().parents[2]


def _history(with_gpu: bool = True) -> pd.DataFrame:
    days = pd.date_range("2026-09-07", periods=70)
    weekend = days.weekday >= 5
    req = np.where(weekend, 6e5, 1e6)
    gpu = np.full(70, 144.0)
    gpu[60:63] = 216.0  # the incident: more replicas at unchanged traffic
    req[50] *= 0.72  # a holiday dip
    frame = pd.DataFrame(
        {
            "series": "chat",
            "day": days.strftime("%Y-%m-%d"),
            "cost": gpu * 2.0,
            "requests": req,
            "tokens": req * 200,
            "holiday": np.where(np.arange(70) == 50, "1", ""),
        }
    )
    if with_gpu:
        frame["gpu_hours"] = gpu
    return frame


def _run(frame: pd.DataFrame, *args: str) -> tuple[int, pd.DataFrame, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        list(args), stdin=io.StringIO(frame.to_csv(index=False)), stdout=out, stderr=err
    )
    text = out.getvalue()
    table = (
        pd.read_csv(io.StringIO(text), keep_default_na=False)
        if text
        else pd.DataFrame()
    )
    return code, table, err.getvalue()


def test_the_cli_flags_the_incident_and_classes_the_holiday_as_traffic() -> None:
    code, out, err = _run(_history())
    assert code == 0 and err == ""
    assert list(out.columns[:8]) == [
        "series", "day", "cost_per_1k", "baseline", "lower", "upper", "flag", "cause",
    ]  # fmt: skip
    flagged = out[out["flag"] != ""].set_index("day")
    assert flagged["flag"].to_dict() == {
        "2026-10-27": "traffic",
        "2026-11-06": "anomaly",
        "2026-11-07": "anomaly",
        "2026-11-08": "anomaly",
    }
    assert (
        "GPU-hours 144 → 216 (+50%) at unchanged traffic"
        in flagged.loc["2026-11-06", "cause"]
    )
    assert flagged.loc["2026-10-27", "cause"].endswith("fleet unchanged: holiday dip")


def test_without_gpu_hours_the_output_says_the_cause_is_cost_vs_traffic_only() -> None:
    code, out, err = _run(_history(with_gpu=False))
    assert code == 0
    assert NOTE_NO_GPU in err
    assert (out["note"].str.contains(NOTE_NO_GPU)).all()
    assert set(out["flag"]) <= {"", "anomaly", "traffic"}
    assert (out["flag"] == "anomaly").sum() == 3


def test_a_bad_value_exits_2_naming_the_column_and_value() -> None:
    frame = _history().head(3).astype({"cost": object})
    frame.loc[1, "cost"] = "lots"
    code, _, err = _run(frame)
    assert code == 2
    assert "cost='lots'" in err


def test_the_cli_reproduces_detect_exactly() -> None:
    frame = _history()
    _, out, _ = _run(frame)
    direct = detect(
        frame.assign(day=pd.to_datetime(frame["day"]), holiday=frame["holiday"] == "1")
    )
    assert (out["flag"].to_numpy() == direct["flag"].to_numpy()).all()
    np.testing.assert_allclose(
        pd.to_numeric(out["baseline"].replace("", np.nan)),
        direct["baseline"],
        rtol=1e-9,
    )


def test_python_dash_m_reads_stdin_and_writes_stdout() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "analytics.anomalies"],
        input=_history().to_csv(index=False),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = pd.read_csv(io.StringIO(proc.stdout), keep_default_na=False)
    assert (out["flag"] == "anomaly").sum() == 3


def test_the_cli_on_the_benchmark_series_reproduces_the_benchmarks_flags() -> None:
    from bench.anomaly_series import generate
    from bench.bench_anomalies import run_costapp

    series = generate(100, n_series=3, n_days=91)
    expected = run_costapp(series, BaselineConfig())
    csv = series[
        ["series", "day", "cost", "requests", "tokens", "gpu_hours", "holiday"]
    ].assign(
        day=series["day"].dt.strftime("%Y-%m-%d"), holiday=series["holiday"].astype(int)
    )
    code, out, _ = _run(csv)
    assert code == 0
    assert (out["flag"].to_numpy() == expected["flag"].to_numpy()).all()
    assert (out["flag"] == "anomaly").sum() > 0


def test_detect_names_the_replicas_the_baseline_implies() -> None:
    import pandas as pd

    from analytics.anomalies import detect, replicas_baseline

    # 4 weeks of one weekday: 6 replicas x 4 GPUs x 24 h = 576 GPU-hours at
    # $0.5 per GPU-hour and 1M requests; then 9 replicas at the same traffic.
    days = pd.date_range("2026-01-05", periods=5, freq="7D")
    replicas = [6.0, 6.0, 6.0, 6.0, 9.0]
    frame = pd.DataFrame(
        {
            "series": "chat",
            "day": days,
            "replicas": replicas,
            "gpu_hours": [r * 96 for r in replicas],
            "cost": [r * 96 * 0.5 for r in replicas],
            "tokens": 2e8,
            "requests": 1e6,
        }
    )
    out = detect(frame)
    last = out.iloc[-1]
    assert last["flag"] == "anomaly"
    assert last["gpu_hours_b"] == 576.0  # the parts of the baseline come out
    assert replicas_baseline(frame.assign(gpu_hours_b=out["gpu_hours_b"]))[-1] == 6.0
    assert last["cause"] == (
        "$/1k requests 0.288 → 0.432 (+50%): replicas 6 → 9, "
        "GPU-hours 576 → 864 (+50%) at unchanged traffic"
    )


def test_a_fall_is_a_saving_on_a_final_bill_and_data_to_check_on_another() -> None:
    days = pd.date_range("2025-01-06", periods=60)
    frame = pd.DataFrame(
        {
            "series": "a",
            "day": days.strftime("%Y-%m-%d"),
            "cost": np.where(np.arange(60) >= 40, 60.0, 100.0),
            "requests": 1e5,
        }
    )
    flags = {}
    for final in ("yes", "no"):
        code, table, _ = _run(frame.assign(final=final))
        assert code == 0
        flags[final] = set(table.loc[table["flag"] != "", "flag"])
    assert flags == {"yes": {"saving"}, "no": {"check"}}
    # Two days of the new price, then it is the baseline: no more flags.
    code, table, _ = _run(frame)  # no column: billed days, final
    assert list(table.loc[table["flag"] != "", "day"]) == ["2025-02-15", "2025-02-16"]
