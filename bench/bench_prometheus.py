# ruff: noqa: B023  (closures are used inside the loop that binds them)
"""Backfill speed against the raw-HTTP floor of the same requests (not run by CI).

    .venv/bin/python bench/bench_prometheus.py --smoke        # seconds
    .venv/bin/python bench/bench_prometheus.py --days 1       # 20 deployments, 15 s
    .venv/bin/python bench/bench_prometheus.py --days 1 --store /tmp/bp   # keep the TSDB
    .venv/bin/python bench/bench_prometheus.py --days 1 --store /tmp/bp --gzip

Generates ``--deployments`` vLLM deployments (two pods each, V1 names, three
latency histograms) scraped every 15 s for ``--days`` days, back-fills a real
Prometheus with ``promtool tsdb create-blocks-from openmetrics``, then, per
repetition:

* costapp: ``PrometheusSource.fetch`` over the whole window (raw samples,
  budget-sized chunks, hourly records built; no database writes, which
  docs/benchmarks.md measures apart);
* floor: the very same HTTP requests (recorded from the costapp run, with the
  Accept-Encoding costapp sent) fetched with plain ``requests`` at the same
  concurrency, each body read whole in one read as costapp reads it, not
  parsed.

Prints medians and the ratio costapp / floor (goal: <= 1.5), and, because the
machine is often shared, the CPU seconds behind each side (this process's and
Prometheus's) and the load average: on a busy machine the wall-clock ratio
follows the CPU one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "costapp.settings")

T0 = int(datetime(2024, 3, 4, tzinfo=UTC).timestamp())
BOUNDS = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]


def generate(path: Path, *, deployments: int, days: int, step: int) -> int:
    rng = np.random.default_rng(1)
    times = T0 + step * np.arange(days * 86400 // step)
    n = times.size
    ts = [str(t) for t in times.tolist()]
    families: dict[str, tuple[str, list[str]]] = {}
    samples = 0

    def add(family: str, kind: str, name: str, labels: str, values: np.ndarray) -> None:
        nonlocal samples
        text = [
            f"{name}{{{labels}}} {v!r} {t}"
            for v, t in zip(values.tolist(), ts, strict=True)
        ]
        families.setdefault(family, (kind, []))[1].append("\n".join(text))
        samples += n

    for d in range(deployments):
        for pod in range(2):
            labels = f'namespace="d{d:02d}",pod="p{pod}",engine="0",model_name="m"'
            for reason in ("stop", "length", "abort"):
                add(
                    "vllm:request_success",
                    "counter",
                    "vllm:request_success_total",
                    f'{labels},finished_reason="{reason}"',
                    np.cumsum(rng.poisson(2, n)).astype(float),
                )
            for c in (
                "prompt_tokens",
                "generation_tokens",
                "num_preemptions",
                "prefix_cache_queries",
                "prefix_cache_hits",
            ):
                add(
                    f"vllm:{c}",
                    "counter",
                    f"vllm:{c}_total",
                    labels,
                    np.cumsum(rng.poisson(100, n)).astype(float),
                )
            for g in (
                "num_requests_running",
                "num_requests_waiting",
                "kv_cache_usage_perc",
            ):
                add(
                    f"vllm:{g}",
                    "gauge",
                    f"vllm:{g}",
                    labels,
                    rng.integers(0, 20, n).astype(float),
                )
            for h in (
                "time_to_first_token_seconds",
                "inter_token_latency_seconds",
                "e2e_request_latency_seconds",
            ):
                fam = f"vllm:{h}"
                per = np.cumsum(rng.poisson(1, (n, len(BOUNDS) + 1)), axis=1)
                cum = np.cumsum(per, axis=0).astype(float)
                for j, le in enumerate([*map(str, BOUNDS), "+Inf"]):
                    add(
                        fam,
                        "histogram",
                        f"{fam}_bucket",
                        f'{labels},le="{le}"',
                        cum[:, j],
                    )
                add(fam, "histogram", f"{fam}_sum", labels, cum[:, -1] * 0.3)
                add(fam, "histogram", f"{fam}_count", labels, cum[:, -1])
    with path.open("w") as f:
        for family, (kind, chunks) in families.items():
            f.write(f"# TYPE {family} {kind}\n")
            for chunk in chunks:
                f.write(chunk)
                f.write("\n")
        f.write("# EOF\n")
    return samples


def build(
    root: Path, args: argparse.Namespace, promtool: str
) -> tuple[int, float, float]:
    """Generate the OpenMetrics file and turn it into TSDB blocks under root/tsdb."""
    t = time.perf_counter()
    samples = generate(
        root / "in.om", deployments=args.deployments, days=args.days, step=args.step
    )
    gen_s = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--quiet",
            f"--max-block-duration={max(24, args.days * 24 + 24)}h",
            str(root / "in.om"),
            str(root / "tsdb"),
        ],
        check=True,
    )
    build_s = time.perf_counter() - t
    (root / "in.om").unlink()
    return samples, gen_s, build_s


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_whole(session: requests.Session, url: str, encoding: str) -> int:
    """One body, read whole in one read (as costapp's client reads it)."""
    response = session.get(
        url, headers={"Accept-Encoding": encoding}, timeout=120, stream=True
    )
    try:
        return len(response.raw.read(decode_content=True))
    finally:
        response.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=1)
    parser.add_argument("--deployments", type=int, default=20)
    parser.add_argument("--step", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-samples", type=int, default=20_000_000)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument(
        "--gzip",
        action="store_true",
        help="PROMETHEUS_GZIP=true (the floor then asks for gzip too)",
    )
    parser.add_argument(
        "--store",
        type=Path,
        default=None,
        help="keep the TSDB in this folder and reuse it on the next run "
        "(same --days/--deployments/--step; building 1 d x 20 takes ~1.5 min)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.days, args.deployments, args.repeat = 1, 2, 1

    import django

    django.setup()
    from costapp.sources.base import Window
    from costapp.sources.prometheus import (
        Options,
        PrometheusConfig,
        PrometheusSource,
        Target,
    )

    prom, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prom or not promtool:
        sys.exit("needs the prometheus and promtool binaries")
    with tempfile.TemporaryDirectory(prefix="bench-prom-") as tmp:
        root = args.store or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        stamp = root / "built.txt"
        key = f"{args.days} {args.deployments} {args.step}"
        if stamp.exists() and stamp.read_text().split("|")[0] == key:
            samples = int(stamp.read_text().split("|")[1])
            gen_s = build_s = 0.0
        else:
            shutil.rmtree(root / "tsdb", ignore_errors=True)
            samples, gen_s, build_s = build(root, args, promtool)
            stamp.write_text(f"{key}|{samples}")
        (root / "p.yml").write_text("scrape_configs: []\n")
        sock = __import__("socket").socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        proc = subprocess.Popen(
            [
                prom,
                f"--storage.tsdb.path={root / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--config.file={root / 'p.yml'}",
                "--storage.tsdb.retention.time=10y",
                f"--query.max-samples={args.max_samples}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                time.sleep(0.1)
            targets = [
                Target(f"d{d:02d}", "vllm", f'namespace="d{d:02d}"')
                for d in range(args.deployments)
            ]
            window = Window(
                datetime.fromtimestamp(T0, UTC),
                datetime.fromtimestamp(T0 + args.days * 86400, UTC),
            )
            ours: list[float] = []
            floor: list[float] = []
            # (this process, Prometheus) CPU seconds per run, for each side.
            ours_cpu: list[tuple[float, float]] = []
            floor_cpu: list[tuple[float, float]] = []
            loads: list[float] = []
            for _ in range(args.repeat):
                source = PrometheusSource(
                    targets=targets,
                    config=PrometheusConfig(
                        url=url,
                        max_samples=args.max_samples,
                        concurrency=args.concurrency,
                        **({"gzip": True} if args.gzip else {}),
                    ),
                    options=Options(scrape_interval_s=args.step),
                )
                # The floor sends what costapp sent, Accept-Encoding included
                # (gzip or identity changes both sides' work).
                urls: list[tuple[str, str]] = []
                source.client.session.hooks["response"].append(
                    lambda r, *a, **k: urls.append(
                        (r.request.url, r.request.headers.get("Accept-Encoding", ""))
                    )
                )
                loads.append(os.getloadavg()[0])
                c, p, t = (
                    time.process_time(),
                    cpu_seconds(proc.pid),
                    time.perf_counter(),
                )
                records = sum(len(b.records) for b in source.fetch(window))
                ours.append(time.perf_counter() - t)
                ours_cpu.append((time.process_time() - c, cpu_seconds(proc.pid) - p))

                session = requests.Session()
                c, p, t = (
                    time.process_time(),
                    cpu_seconds(proc.pid),
                    time.perf_counter(),
                )
                with ThreadPoolExecutor(args.concurrency) as pool:
                    sizes = list(
                        pool.map(lambda u: read_whole(session, u[0], u[1]), urls)
                    )
                floor.append(time.perf_counter() - t)
                floor_cpu.append((time.process_time() - c, cpu_seconds(proc.pid) - p))
            ratio = statistics.median(ours) / statistics.median(floor)
            print(
                f"window: {args.days} d x {args.deployments} deployments, {args.step} s scrapes, "
                f"{samples:,} samples stored (generate {gen_s:.1f} s, promtool {build_s:.1f} s), "
                f"Accept-Encoding: {urls[0][1]!r}"
            )
            print(
                f"requests per backfill: {len(urls)}, response bytes: {sum(sizes):,}, "
                f"records: {records:,}"
            )
            print(
                f"costapp backfill median: {statistics.median(ours):.2f} s  runs {[round(x, 2) for x in ours]}"
            )
            print(
                f"raw HTTP floor median:   {statistics.median(floor):.2f} s  runs {[round(x, 2) for x in floor]}"
            )
            print(f"ratio costapp / floor:   {ratio:.2f}  (goal <= 1.5)")

            def cpu(runs: list[tuple[float, float]]) -> str:
                client = statistics.median(r[0] for r in runs)
                server = statistics.median(r[1] for r in runs)
                return f"{client:.2f} s here + {server:.2f} s Prometheus"

            total_ours = statistics.median(sum(r) for r in ours_cpu)
            total_floor = statistics.median(sum(r) for r in floor_cpu)
            print(f"CPU costapp (median):    {cpu(ours_cpu)}")
            print(f"CPU floor (median):      {cpu(floor_cpu)}")
            print(
                f"CPU ratio (all seconds): {total_ours / total_floor:.2f}  "
                f"load average at each run: {[round(x, 1) for x in loads]} "
                f"on {os.cpu_count()} CPUs"
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
