"""Real dcgm-exporter output of each generation into hourly GPU rows (pure: no
HTTP, no database). Each fixture is replayed as two hours of scrapes every
60 s; the sources of the fixtures are in fixtures/SOURCES.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from costapp.sources.base import DeviceHourRecord
from costapp.sources.engines import (
    DCGM,
    DCGM_FIELDS,
    dcgm_exporter_generation,
    device_key,
    mig_slices,
)
from costapp.sources.prometheus.reader import RawSeries
from costapp.sources.prometheus.records import CounterState, device_records
from tests.support.exposition import Exposition, parse_exposition

FIXTURES = Path(__file__).parent / "fixtures"
T0 = 1_709_510_400  # 2024-03-04 00:00 UTC
HOUR = 3600
HOURS = 2
A800 = "dcgm_exporter_a800x8_mig_2g20gb.prom"  # label Hostname
RENAMED = "dcgm_exporter_4.8_hostname_rtx2000ada_a30mig_excerpt.prom"  # hostname
NO_FB = "dcgm_exporter_h100_mig_no_fb_excerpt.prom"
NVL = "dcgm_exporter_h100nvl_mig_1g11gb_excerpt.prom"


def scrape(name: str, *, relabel: dict[str, str] | None = None) -> Exposition:
    text = (FIXTURES / name).read_text()
    for old, new in (relabel or {}).items():
        text = text.replace(f',{old}="', f',{new}="')
    return parse_exposition(text)


def replayed(expo: Exposition) -> list[RawSeries]:
    """Every sample of the scrape, held for two hours at one scrape a minute
    (a counter grows by its own value each minute)."""
    t = np.array([T0 + m * 60 + 7 for m in range(HOURS * 60)], dtype=float)
    series = []
    for s in expo.samples:
        kind = DCGM_FIELDS.get(s.name)
        grows = kind is not None and kind.kind == "counter"
        v = s.value * (np.arange(1, t.size + 1) if grows else np.ones(t.size))
        series.append(RawSeries({"__name__": s.name, **s.labels}, t, v))
    return series


def ingest(expo: Exposition) -> tuple[list[DeviceHourRecord], dict[int, float]]:
    return device_records(
        deployment="chat",
        series=replayed(expo),
        born=lambda labels: False,
        state=CounterState(),
        slice_start_s=T0,
        slice_end_s=T0 + HOURS * HOUR,
        interval_default=60.0,
    )


def test_the_label_rename_changes_no_hourly_figure() -> None:
    """4.6.0-4.8.3 writes hostname where earlier releases wrote Hostname
    (render_metrics.go, NVIDIA/dcgm-exporter#655): the same node read through
    either generation gives the same rows and GPU-seconds, in one unit."""
    before = scrape(A800)
    after = scrape(A800, relabel={"Hostname": "hostname"})
    assert dcgm_exporter_generation(s.labels for s in before.samples) == "to 4.8.2"
    assert dcgm_exporter_generation(s.labels for s in after.samples) == "4.8.3+"
    rows_before, seconds_before = ingest(before)
    rows_after, seconds_after = ingest(after)
    assert rows_before == rows_after
    assert seconds_before == seconds_after
    # Seven whole GPUs and three 2g.20gb instances of the eighth, all hour.
    for h in (T0, T0 + HOUR):
        assert seconds_after[h] == pytest.approx((7 + 3 * 2 / 7) * HOUR)
    whole = [r for r in rows_after if not r.mig_profile]
    assert {r.hostname for r in rows_after} == {"msxf-hpc-64-35-ai"}
    # GPU_UTIL stays in percent, the DCP ratios in 0..1, energy in joules.
    assert all(r.gpu_util_mean is not None for r in whole)
    assert all(r.gr_engine_active_mean is not None for r in rows_after)
    assert all(0 <= (r.gr_engine_active_mean or 0) <= 1 for r in rows_after)
    mig = [r for r in rows_after if r.mig_profile]
    assert all(r.gpu_util_mean is None for r in mig)  # not reported on MIG
    energy_mj = next(
        s.value
        for s in after.samples
        if s.name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
        and s.labels.get("gpu") == "1"
    )
    gpu1 = next(r for r in whole if r.gpu_index == 1 and r.hour.timestamp() == T0)
    assert gpu1.energy_j == pytest.approx(energy_mj * 59 / 1000)  # 59 increases


def test_a_capture_of_the_renamed_exporter_is_read_by_its_hostname_label() -> None:
    """A 2026 capture with hostname and no FB_USED in the excerpt: FB_FREE says
    the GPUs were up, so GPU-seconds do not go missing."""
    expo = scrape(RENAMED)
    assert dcgm_exporter_generation(s.labels for s in expo.samples) == "4.8.3+"
    rows, seconds = ingest(expo)
    assert {r.hostname for r in rows} == {"dcgm-exporter-wwwjh"}
    assert {(r.gpu_model, r.mig_profile) for r in rows} == {
        ("NVIDIA RTX 2000 Ada Generation", ""),
        ("NVIDIA A30", "1g.6gb"),
    }
    # An A30 has 4 compute slices: its 1g instance is a quarter of the GPU.
    for h in (T0, T0 + HOUR):
        assert seconds[h] == pytest.approx((1 + 1 / 4) * HOUR)
    assert all(r.samples == 60 for r in rows)


def test_mig_instances_without_framebuffer_series_are_up_by_their_engine_activity() -> (
    None
):
    """Some exporters leave DCGM_FI_DEV_FB_* out on H100 MIG instances
    (NVIDIA/dcgm-exporter#512): GR_ENGINE_ACTIVE stands in."""
    rows, seconds = ingest(scrape(NO_FB))
    assert {r.gpu_instance_id for r in rows} == {"7", "8", "9"}
    assert all(r.fb_used_mib_mean is None for r in rows)
    for h in (T0, T0 + HOUR):
        assert seconds[h] == pytest.approx(3 / 7 * HOUR)


def test_a_mig_profile_is_taken_as_the_exporter_reports_it() -> None:
    """H100 NVL's 1g.12gb is reported as 1g.11gb (NVIDIA/dcgm-exporter#544):
    one slice of seven all the same, the reported name kept."""
    rows, seconds = ingest(scrape(NVL))
    assert {r.mig_profile for r in rows} == {"1g.11gb"}
    assert seconds[T0] == pytest.approx(2 / 7 * HOUR)


@pytest.mark.parametrize(
    ("profile", "slices"),
    [
        ("3g.40gb", 3),
        ("1g.11gb", 1),  # H100 NVL 1g.12gb, as some exporters report it
        ("7g.79gb", 7),  # A100 80GB 7g.80gb (NVIDIA/dcgm-exporter#713)
        ("1g.10gb+me", 1),  # with the media extensions
        ("1c.3g.40gb", 3),  # a compute instance: its GPU instance's slices
        ("<<<NULL>>>", None),  # gpu-monitoring-tools#193
        ("8g.90gb", None),
        ("", None),
    ],
)
def test_mig_slices(profile: str, slices: int | None) -> None:
    assert mig_slices(profile) == slices


def test_an_unreadable_mig_profile_leaves_the_hour_unknown_not_a_whole_gpu() -> None:
    expo = parse_exposition(
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",GPU_I_PROFILE="<<<NULL>>>",'
        'GPU_I_ID="6",Hostname="a"} 10\n'
        'DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-2",Hostname="a"} 10\n'
    )
    rows, seconds = ingest(expo)
    assert len(rows) == 4  # both devices' rows are kept
    assert seconds == {}  # but the GPU-seconds of those hours are unknown


def test_the_table_says_what_a_field_is_not_the_scrapes_type_line() -> None:
    """3.3.7-3.5.0's default file typed the PCIe rates as counters; counter
    files copied from it still do. They are rates (bytes per second) here, and
    not read: a counter's increase of a rate means nothing."""
    for name in ("DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"):
        assert DCGM_FIELDS[name].kind == "rate"
        assert DCGM_FIELDS[name].unit == "B/s"
        assert name not in DCGM
    expo = parse_exposition(
        "# TYPE DCGM_FI_PROF_PCIE_TX_BYTES counter\n"
        'DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0",UUID="GPU-1",hostname="a"} 5e9\n'
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",hostname="a"} 10\n'
    )
    rows, _ = ingest(expo)
    assert {r.fb_used_mib_mean for r in rows} == {10.0}
    assert DCGM["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].scale == 1e-3  # mJ -> J


def test_the_host_label_of_either_generation_names_the_host() -> None:
    assert device_key({"Hostname": "a"}).hostname == "a"
    assert device_key({"hostname": "b"}).hostname == "b"
