"""A real Prometheus holding a generated fleet, shared by the telemetry tests."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.support.services import free_port, require_binary, stop, wait_for
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
    prom = require_binary("prometheus")
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
        config = root / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
        port = free_port()
        log = (root / "prometheus.log").open("w")
        proc = subprocess.Popen(
            [
                prom,
                f"--storage.tsdb.path={root / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--config.file={config}",
                "--storage.tsdb.retention.time=10y",
                f"--query.max-samples={PROMETHEUS_MAX_SAMPLES}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_for(
                lambda: requests.get(f"{url}/-/ready", timeout=1).status_code == 200,
                timeout=60,
                what="prometheus",
            )
            yield PromServer(url, truth, root / "tsdb")
        finally:
            stop(proc)
            log.close()
