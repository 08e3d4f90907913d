"""SGLang's static gauges read through a real Prometheus at discovery: the KV
pool it allocated (``sglang:max_total_num_tokens``) and its served context
length (``sglang:context_len``) become today's pool and max_model_len on the
capacity pages."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from costapp.capacity.selectors import Setting, deployment_today
from costapp.models import Deployment, EngineDiscovery
from costapp.sources.prometheus import PrometheusConfig, PrometheusSource, Target
from tests.support.prometheus import prometheus_server
from tests.support.services import wait_for

FIXTURE = (
    Path(__file__).parent / "fixtures" / "sglang_metrics_v0.5.10_datadog_fixture.prom"
)
# The capture has no context_len; two ranks of a TP 2 engine report it, and
# their pool, each: the engine's own aggregation is the lowest.
EXTRA = (
    "# TYPE sglang:context_len gauge\n"
    'sglang:context_len{model_name="facebook/opt-125m",tp_rank="0"} 2048\n'
    'sglang:context_len{model_name="facebook/opt-125m",tp_rank="1"} 2048\n'
    'sglang:max_total_num_tokens{model_name="facebook/opt-125m",tp_rank="1"} 430900\n'
)


@pytest.fixture
def sglang_scraped(tmp_path: Path) -> Iterator[str]:
    body = (FIXTURE.read_text() + EXTRA).encode()

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: sglang\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{server.server_port}'], "
        "labels: {app: sg}}]\n"
    )
    try:
        with prometheus_server(tmp_path, config) as prometheus:
            wait_for(
                lambda: prometheus.query('sglang:context_len{app="sg"}') != [],
                timeout=60,
                what="a scrape of the SGLang exposition",
            )
            yield prometheus.url
    finally:
        server.shutdown()


@pytest.mark.django_db
def test_sglangs_pool_and_context_length_become_todays(sglang_scraped: str) -> None:
    now = time.time()
    source = PrometheusSource(
        targets=[Target("sg", "sglang", 'app="sg"')],
        config=PrometheusConfig(url=sglang_scraped),
        now=lambda: datetime.now(UTC),
    )
    _, (record,) = source.discover(int(now) - 600, int(now) + 1)
    assert record.cache_config == {
        "max_model_len": "2048",
        "max_total_num_tokens": "430839",  # the lower rank's, as SGLang aggregates
    }
    assert "sglang:context_len" in record.series_found
    deployment = Deployment.objects.create(
        name="sg", engine="sglang", model_name="meta-llama/Llama-3.1-8B-Instruct",
        gpu_type="H100-SXM",
    )  # fmt: skip
    EngineDiscovery.objects.create(
        deployment=deployment,
        observed_at=datetime.now(UTC),
        engine="sglang",
        cache_config=record.cache_config,
    )
    today = deployment_today(Deployment.objects.get(name="sg"))
    assert today.settings["max_model_len"] == Setting(2048, "discovered")
    assert today.observed_blocks == 430839 // 16
    assert today.pool_source == "max_total_num_tokens=430,839"
    assert today.scenario is not None
    assert today.scenario.num_gpu_blocks_override == 430839 // 16
