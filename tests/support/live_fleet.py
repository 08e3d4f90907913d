"""A small vLLM fleet whose samples follow a test's clock, for system tests.

Each deployment serves a constant number of requests per second, split evenly
over its pods; a pod is one engine replica (one GPU: ``vllm:num_requests_running``
is the series whose samples say it was up). A plan can double the pods from a
moment on (the same traffic on more GPUs: the cost of a request doubles), or
stop every sample from a moment on (a deployment Prometheus no longer hears).

History is written as OpenMetrics for ``promtool tsdb create-blocks-from``;
what follows is pushed by remote write as the clock reaches it (``Feeder``),
so Prometheus holds exactly the samples "scraped" up to now.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.remote_write import push

PROMPT_PER_REQUEST = 400
GENERATION_PER_REQUEST = 100


@dataclass(frozen=True)
class Plan:
    name: str
    requests_per_s: float
    pods: int = 2
    more_pods_from: float | None = None  # epoch seconds: twice the pods after
    stops_at: float | None = None  # epoch seconds: no sample at or after

    def pods_at(self, t: float) -> int:
        if self.stops_at is not None and t >= self.stops_at:
            return 0
        if self.more_pods_from is not None and t >= self.more_pods_from:
            return 2 * self.pods
        return self.pods


@dataclass
class Fleet:
    """Counters per pod, advanced step by step in time order."""

    plans: list[Plan]
    job: str = "vllm"
    counters: dict[str, float] = field(default_factory=dict)
    last_t: float | None = None

    def labels(self, plan: Plan, pod: int) -> dict[str, str]:
        return {
            "job": self.job,
            "deployment": plan.name,
            "pod": f"{plan.name}-{pod}",
            "model_name": "m",
        }

    def step(self, t: float) -> Iterator[tuple[str, dict[str, str], float]]:
        """The samples scraped at ``t``: (name, labels, value). Counters
        grow by what each pod served since the previous scrape."""
        dt = 0.0 if self.last_t is None else t - self.last_t
        self.last_t = t
        for plan in self.plans:
            n = plan.pods_at(t)
            for pod in range(n):
                base = self.labels(plan, pod)
                served = plan.requests_per_s * dt / n
                key = base["pod"]
                done = self.counters.get(key, 0.0) + served
                self.counters[key] = done
                yield (
                    "vllm:request_success_total",
                    {**base, "finished_reason": "stop"},
                    done,
                )
                yield "vllm:prompt_tokens_total", base, done * PROMPT_PER_REQUEST
                yield (
                    "vllm:generation_tokens_total",
                    base,
                    done * GENERATION_PER_REQUEST,
                )
                yield "vllm:num_requests_running", base, 2.0

    def history(self, path: Path, *, start: float, end: float, step: float) -> int:
        """OpenMetrics of every scrape in ``[start, end)`` for promtool;
        returns the samples written."""
        families: dict[str, list[str]] = {}
        t = start
        count = 0
        while t < end:
            for name, labels, value in self.step(t):
                text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                families.setdefault(name, []).append(
                    f"{name}{{{text}}} {value!r} {t:.3f}"
                )
                count += 1
            t += step
        kinds = {"vllm:num_requests_running": "gauge"}
        with path.open("w") as f:
            for name, lines in families.items():
                family = name.removesuffix("_total")
                f.write(f"# TYPE {family} {kinds.get(name, 'counter')}\n")
                # One series after another, each in time order (OpenMetrics).
                lines.sort(key=lambda line: line.split(" ", 1)[0])
                f.write("\n".join(lines) + "\n")
            f.write("# EOF\n")
        return count


class Feeder:
    """Pushes every scrape from ``start`` up to ``clock()``, then keeps up
    with the clock every ``step`` seconds on a thread, until stopped."""

    def __init__(
        self,
        fleet: Fleet,
        url: str,
        *,
        clock: Callable[[], float],
        start: float,
        step: float,
    ) -> None:
        self.fleet = fleet
        self.url = url
        self.clock = clock
        self.next_t = start
        self.step = step
        self.pushed_to: float | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)

    def catch_up(self) -> int:
        """Push every scrape due by now; returns the samples pushed."""
        now = self.clock()
        series: dict[tuple[tuple[str, str], ...], list[tuple[int, float]]] = {}
        count = 0
        while self.next_t <= now:
            for name, labels, value in self.fleet.step(self.next_t):
                key = tuple(sorted({**labels, "__name__": name}.items()))
                series.setdefault(key, []).append((round(self.next_t * 1000), value))
                count += 1
            self.pushed_to = self.next_t
            self.next_t += self.step
        if series:
            push(self.url, [(dict(k), v) for k, v in series.items()])
        return count

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.catch_up()
            except BaseException as exc:  # reported by the test that owns it
                self.error = exc
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def wait_until(clock: Callable[[], float], when: float) -> None:
    """Sleep until ``clock()`` reaches ``when``."""
    while (left := when - clock()) > 0:
        time.sleep(min(left, 1.0))
