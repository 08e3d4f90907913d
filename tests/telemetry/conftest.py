"""A real Prometheus holding a generated fleet, shared by the telemetry tests."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.prometheus import prometheus_server
from tests.support.services import require_binary
from tests.telemetry.synth import Truth, generate

# Prometheus refuses any query loading more samples than this; costapp's own
# budget (PROMETHEUS_MAX_SAMPLES in the tests) is below it. Reading one day of
# one deployment at once would need ~170,000.
PROMETHEUS_MAX_SAMPLES = 20_000
BUDGET = 15_000


@dataclass(frozen=True)
class PromServer:
    url: str
    truth: Truth
    data_dir: Path


@pytest.fixture(scope="session")
def prometheus() -> Iterator[PromServer]:
    require_binary("prometheus")  # before generating the fleet
    promtool = require_binary("promtool")
    with tempfile.TemporaryDirectory(prefix="costapp-prom-") as tmp:
        root = Path(tmp)
        truth = generate(root / "fleet.om")
        # One pass over the file per block: large blocks keep this a few seconds.
        subprocess.run(
            [
                promtool,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                "--quiet",
                "--max-block-duration=96h",
                str(root / "fleet.om"),
                str(root / "tsdb"),
            ],
            check=True,
            capture_output=True,
        )
        (root / "fleet.om").unlink()
        with prometheus_server(
            root,
            "global:\n  scrape_interval: 1m\nscrape_configs: []\n",
            "--storage.tsdb.retention.time=10y",
            f"--query.max-samples={PROMETHEUS_MAX_SAMPLES}",
        ) as server:
            yield PromServer(server.url, truth, root / "tsdb")
