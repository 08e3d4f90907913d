"""What a Prometheus read is asked for: the deployments (targets), the
options that size its requests, and the steps a run takes.

A leaf of the package: the reader, the record builders and the source all
take these, and this module imports none of them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from analytics.telemetry import HOUR_S
from costapp.sources.base import Window


@dataclass(frozen=True)
class Target:
    """One deployment as Prometheus sees it."""

    name: str
    engine: str
    selector: str  # label matchers without braces
    gpu_share: float = 1.0  # GPUs per replica when no DCGM selector is given
    dcgm_selector: str = ""
    # Matchers picking the prefill engines among ``selector``'s series (a
    # disaggregated deployment); "" for one pool.
    prefill_selector: str = ""


@dataclass(frozen=True)
class Options:
    # Used to size chunks before any sample is seen; a smaller value is safe
    # (smaller chunks), a larger one than reality is caught by Prometheus's
    # own limit and the chunk is halved.
    scrape_interval_s: float = 15.0
    slice_hours: int = 24
    # Forces a chunk length (tests compare chunked and unchunked reads).
    chunk_s: float | None = None
    counts: str = "raw"  # or "increase"
    # How far back the first slice looks for each counter's previous sample
    # (the baseline of the first increase) ...
    baseline_lookback_s: int = 6 * HOUR_S
    # ... and how far back a series must be absent to count as born inside the
    # window (its first value is then an increase from zero).
    born_lookback_s: int = 7 * 24 * HOUR_S
    # DCGM series not tied to a deployment (whole fleet), or "".
    fleet_dcgm_selector: str = ""


def targets_from_deployments(
    deployments: Sequence[Any], dcgm_selectors: dict[str, str] | None = None
) -> list[Target]:
    """One target per deployment; a DCGM selector given for this run (the
    backfill form, ``--dcgm-selector``) wins over ``Deployment.dcgm_selector``."""
    dcgm_selectors = dcgm_selectors or {}
    return [
        Target(
            name=d.name,
            engine=d.engine,
            selector=d.prometheus_selector,
            gpu_share=d.gpu_share,
            dcgm_selector=(
                dcgm_selectors.get(d.name) or getattr(d, "dcgm_selector", "") or ""
            ).strip(),
            prefill_selector=(getattr(d, "prefill_selector", "") or "").strip(),
        )
        for d in deployments
    ]


def options_from_params(params: dict[str, Any]) -> Options:
    known = {f for f in Options.__dataclass_fields__}
    values = {k: v for k, v in params.items() if k in known}
    return replace(Options(), **values)


def plan_steps(window: Window, *, targets: int, options: Options) -> int:
    """Steps a run over ``window`` takes: discovery, then one per target (and
    the fleet's DCGM read) and slice. Also the backfill form's step budget."""
    start = int(window.start.timestamp()) // HOUR_S * HOUR_S
    end = -(-math.ceil(window.end.timestamp()) // HOUR_S) * HOUR_S
    slices = -(-(end - start) // (options.slice_hours * HOUR_S))
    fleet = 1 if options.fleet_dcgm_selector else 0
    return 1 + slices * (targets + fleet)
