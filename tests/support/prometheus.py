"""A real Prometheus on a free loopback port, for the tests that scrape
costapp's /metrics with it or read back-filled series from it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.support.services import free_port, require_binary, stop, wait_for


@dataclass(frozen=True)
class Prometheus:
    url: str

    def query(self, q: str) -> list[dict[str, Any]]:
        body = requests.get(f"{self.url}/api/v1/query", params={"query": q}, timeout=5)
        return list(body.json()["data"]["result"])


@contextmanager
def prometheus_server(root: Path, config: str, *flags: str) -> Iterator[Prometheus]:
    """Prometheus with ``config`` as its prometheus.yml and its TSDB (and
    log) under ``root``, ready to answer; stopped afterwards."""
    binary = require_binary("prometheus")
    (root / "prometheus.yml").write_text(config)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (root / "prometheus.log").open("w") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--storage.tsdb.path={root / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--config.file={root / 'prometheus.yml'}",
                *flags,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(
                lambda: requests.get(f"{url}/-/ready", timeout=1).status_code == 200,
                timeout=60,
                what="prometheus",
            )
            yield Prometheus(url)
        finally:
            stop(proc)


@contextmanager
def scraping_costapp(
    root: Path,
    live_server_url: str,
    *,
    credentials: str | None = None,
    credentials_file: Path | None = None,
) -> Iterator[Prometheus]:
    """Prometheus scraping ``live_server_url``/metrics every second with a
    bearer token (given, or read from a file), once a scrape has succeeded."""
    if (credentials is None) == (credentials_file is None):
        raise ValueError("give one of credentials and credentials_file")
    secret = (
        f"credentials: {credentials}"
        if credentials is not None
        else f"credentials_file: {credentials_file}"
    )
    port = live_server_url.rsplit(":", 1)[1]
    config = (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n"
        "  - job_name: costapp\n"
        "    metrics_path: /metrics\n"
        f"    authorization: {{type: Bearer, {secret}}}\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    with prometheus_server(root, config) as prometheus:
        wait_for(
            lambda: any(
                r["value"][1] == "1" for r in prometheus.query('up{job="costapp"}')
            ),
            timeout=60,
            what="a successful scrape",
        )
        yield prometheus
