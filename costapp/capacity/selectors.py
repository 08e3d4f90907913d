"""Reads for the capacity pages: what runs today, saved scenarios, calibrations.

Reads: the engine runs in ``whatif.py`` (once here, to find the longest
max_model_len a reported pool admits) and display strings are built in
``tables.py`` (views -> tables -> whatif -> selectors).

Today's configuration is assembled from the fleet (model, GPU, TP, MIG, engine),
what telemetry discovered (``vllm:cache_config_info``: settings and the pool the
engine allocated, ``num_gpu_blocks``), the busiest hour of the last seven days
(traffic, request shape, replicas up) with the week's prefix-cache hit rate, and
the rate card. Every value carries where it came from, so a default is never
mistaken for a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone

from analytics.capacity import engine as capacity_engine
from analytics.capacity.calibration_types import Calibration as EngineCalibration
from analytics.capacity.engine import Scenario
from analytics.capacity.errors import CapacityError
from analytics.errors import InvalidInput
from costapp.capacity import adapters
from costapp.costs.rates import card_per_gpu_hour, rate_book
from costapp.models import Calibration, Deployment, DeploymentHour, IngestRun
from costapp.models import Scenario as SavedScenario

DEFAULT_ITL_MS = 50.0
DEFAULT_TTFT_MS = 2000.0
DEFAULT_PROMPT_TOKENS = 512
DEFAULT_OUTPUT_TOKENS = 256
PEAK_WINDOW = timedelta(days=7)


@dataclass(frozen=True)
class Setting:
    value: Any
    origin: str  # fleet, discovered, observed, inferred, rate card, default, assumed
    blank: str = "engine default"  # what None means for this setting

    @property
    def text(self) -> str:
        return self.blank if self.value is None else str(self.value)


@dataclass(frozen=True)
class PeakTraffic:
    hour: datetime
    requests_per_s: float
    prompt_tokens: float | None  # mean per request; None when no requests
    output_tokens: float | None
    hours_with_data: int
    # Replicas up during that hour (mean of the engine's instances); None unknown.
    replicas: float | None = None
    # The window's prefix-cache hits / queries; None where the engine says nothing.
    prefix_cache_hit_rate: float | None = None


@dataclass(frozen=True)
class Price:
    per_gpu_hour: Decimal
    currency: str
    gpu_type: str
    # The rate card it came from, so every price on a page says its basis.
    kind: str = ""  # list | contract
    instance_type: str = ""
    effective_from: date | None = None
    source: str = ""

    @property
    def unconfirmed(self) -> bool:
        """The catalogue marks a price it could not confirm (a Capacity Blocks
        range standing in for an on-demand price) in its source."""
        return "unconfirmed" in self.source.lower()

    @property
    def basis(self) -> str:
        parts = [self.kind or "rate card"]
        if self.instance_type:
            parts.append(self.instance_type)
        if self.effective_from:
            parts.append(f"from {self.effective_from.isoformat()}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Today:
    deployment: Deployment
    scenario: Scenario | None
    settings: dict[str, Setting]
    discovered: dict[str, Any]
    observed_blocks: int | None
    traffic: PeakTraffic | None
    price: Price | None
    problems: tuple[str, ...] = ()
    # Telemetry figures generated from the capacity engine itself (the demo's):
    # agreement on them is circular.
    engine_figures: frozenset[str] = frozenset()
    # Which reported figure the pool came from: vLLM's num_gpu_blocks, or
    # SGLang's max_total_num_tokens (tokens, converted to blocks).
    pool_source: str = "num_gpu_blocks"


def peak_hour_traffic(
    deployment: Deployment, *, now: datetime | None = None
) -> PeakTraffic | None:
    """The busiest UTC hour of the last seven days, by finished requests.

    Hours without rows are missing, not zero; an hour with no finished requests
    has no request shape (tokens / 0 is not a number).
    """
    now = now or timezone.now()
    rows = list(
        DeploymentHour.objects.filter(
            deployment=deployment, hour__gte=now - PEAK_WINDOW, hour__lt=now
        ).only(
            "hour",
            "requests_stop",
            "requests_length",
            "prompt_tokens",
            "generation_tokens",
            "replicas_mean",
            "prefix_cache_queries",
            "prefix_cache_hits",
        )
    )
    if not rows:
        return None
    peak = max(rows, key=lambda r: (r.requests, r.hour))
    requests = peak.requests
    queries = sum(r.prefix_cache_queries or 0.0 for r in rows if _hit_known(r))
    hits = sum(r.prefix_cache_hits or 0.0 for r in rows if _hit_known(r))
    return PeakTraffic(
        hour=peak.hour,
        requests_per_s=requests / 3600.0,
        prompt_tokens=peak.prompt_tokens / requests if requests > 0 else None,
        output_tokens=peak.generation_tokens / requests if requests > 0 else None,
        hours_with_data=len(rows),
        replicas=peak.replicas_mean,
        prefix_cache_hit_rate=hits / queries if queries > 0 else None,
    )


def _hit_known(row: DeploymentHour) -> bool:
    return bool(row.prefix_cache_queries) and row.prefix_cache_hits is not None


def gpu_hour_price(
    *,
    gpu_type: str,
    instance_type: str = "",
    region: str = "us-east-1",
    day: date | None = None,
) -> Price | None:
    """$ per GPU-hour in force on ``day`` (instance price / GPUs per instance)."""
    card = rate_book().card(
        gpu_type=gpu_type,
        instance_type=instance_type,
        region=region,
        day=day or timezone.now().date(),
    )
    if card is None:
        return None
    return Price(
        per_gpu_hour=card_per_gpu_hour(card),
        currency=card.currency,
        gpu_type=gpu_type,
        kind=card.kind,
        instance_type=card.instance_type,
        effective_from=card.effective_from,
        source=card.source,
    )


def _number(value: Any, kind: type) -> Any:
    """A label value as a number; Prometheus labels are strings ("0.9", "None")."""
    if value is None or value == "" or str(value).lower() in {"none", "null"}:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number):
        return None
    return int(number) if kind is int else number


def engine_figures(deployment: Deployment) -> frozenset[str]:
    """The figures of ``deployment``'s telemetry that were generated from the
    capacity engine itself, as the runs that wrote its hours declare them
    (``params["engine_figures"]``: the demo's runs do)."""
    declared = IngestRun.objects.filter(
        params__has_key="engine_figures",
        pk__in=DeploymentHour.objects.filter(deployment=deployment).values("run"),
    ).values_list("params", flat=True)
    return frozenset(name for params in declared for name in params["engine_figures"])


def _discovered(deployment: Deployment) -> dict[str, Any]:
    try:
        discovery = deployment.discovery
    except Deployment.discovery.RelatedObjectDoesNotExist:  # type: ignore[attr-defined]
        return {}
    return dict(discovery.cache_config or {})


def deployment_today(deployment: Deployment, *, now: datetime | None = None) -> Today:
    """What runs today, as a scenario the engine can evaluate."""
    now = now or timezone.now()
    settings: dict[str, Setting] = {}
    problems: list[str] = []
    config = _discovered(deployment)

    try:
        model = adapters.catalogue_model_name(deployment.model_name)
        settings["model"] = Setting(model, "fleet")
    except InvalidInput as exc:
        model = ""
        problems.append(str(exc))
    settings["gpu"] = Setting(deployment.gpu_type, "fleet")
    settings["tp"] = Setting(deployment.tensor_parallel_size, "fleet")
    settings["mig_profile"] = Setting(
        deployment.mig_profile or None, "fleet", "whole GPU"
    )
    if deployment.engine != "vllm":
        problems.append(
            f"engine {deployment.engine}: the memory model is vLLM's, so pool and "
            "blocks are vLLM's figures for the same settings"
        )
    if deployment.engine_version:
        settings["engine_version"] = Setting(deployment.engine_version, "fleet")
    else:
        settings["engine_version"] = Setting(adapters.DEFAULT_ENGINE_VERSION, "default")
    quant = adapters.weight_dtype_from_name(deployment.model_name)
    settings["weight_dtype"] = Setting(quant or "bf16", "assumed")

    declared = dict(deployment.serving_args or {})
    cache_dtype = str(config.get("cache_dtype") or "").lower()
    if cache_dtype in adapters.KV_DTYPES:
        settings["kv_dtype"] = Setting(cache_dtype, "discovered")
    elif declared.get("kv_cache_dtype") in adapters.KV_DTYPES:
        settings["kv_dtype"] = Setting(declared["kv_cache_dtype"], "fleet")
    else:
        settings["kv_dtype"] = Setting("auto", "default")
    if cache_dtype and cache_dtype not in adapters.KV_DTYPES:
        problems.append(f"discovered cache_dtype={cache_dtype!r} is not known")
    for name, kind, default in (
        ("block_size", int, 16),
        ("gpu_memory_utilization", float, 0.9),
        ("max_model_len", int, None),  # None: the model's maximum
        ("max_num_seqs", int, None),
        ("max_num_batched_tokens", int, None),
    ):
        value = _number(config.get(name), kind)
        written = _number(declared.get(name), kind)
        if value is not None and value > 0:
            settings[name] = Setting(value, "discovered")
        elif written is not None and written > 0:
            settings[name] = Setting(written, "fleet")
        else:
            blank = "model maximum" if name == "max_model_len" else "engine default"
            settings[name] = Setting(default, "default", blank)
    eager = str(config.get("enforce_eager", "")).lower()
    if eager in {"true", "false"}:
        settings["enforce_eager"] = Setting(eager == "true", "discovered")
    elif isinstance(declared.get("enforce_eager"), bool):
        settings["enforce_eager"] = Setting(declared["enforce_eager"], "fleet")
    else:
        settings["enforce_eager"] = Setting(False, "default")
    problems += _declared_against_discovered(declared, settings)
    observed_blocks = _number(config.get("num_gpu_blocks"), int)
    pool_source = "num_gpu_blocks"
    pool_tokens = _number(config.get("max_total_num_tokens"), int)
    if not (observed_blocks and observed_blocks > 0) and pool_tokens:
        # SGLang reports its pool in tokens: the same pool, in today's blocks.
        observed_blocks = pool_tokens // int(settings["block_size"].value or 16)
        pool_source = f"max_total_num_tokens={pool_tokens:,}"
    if observed_blocks is not None and observed_blocks > 0:
        # The pool the running engine allocated: today sizes batches from it,
        # not from the memory model (whose figure the page shows beside it).
        settings["num_gpu_blocks_override"] = Setting(observed_blocks, "discovered")
    else:
        observed_blocks = None

    traffic = peak_hour_traffic(deployment, now=now)
    if traffic is not None and traffic.prompt_tokens is not None:
        settings["prompt_tokens"] = Setting(round(traffic.prompt_tokens), "observed")
        settings["output_tokens"] = Setting(
            max(1, round(traffic.output_tokens or 0)), "observed"
        )
        settings["target_requests_per_s"] = Setting(
            round(traffic.requests_per_s, 4), "observed"
        )
    else:
        settings["prompt_tokens"] = Setting(DEFAULT_PROMPT_TOKENS, "default")
        settings["output_tokens"] = Setting(DEFAULT_OUTPUT_TOKENS, "default")
        settings["target_requests_per_s"] = Setting(None, "default", "none (1 replica)")
    if traffic is not None and traffic.prefix_cache_hit_rate is not None:
        hit = min(max(traffic.prefix_cache_hit_rate, 0.0), 0.999)
        settings["prefix_cache_hit_rate"] = Setting(round(hit, 4), "observed")
    settings["itl_sla_ms"] = (
        Setting(float(deployment.slo_itl_p95_ms), "fleet")
        if deployment.slo_itl_p95_ms
        else Setting(DEFAULT_ITL_MS, "default")
    )
    settings["ttft_sla_ms"] = (
        Setting(float(deployment.slo_ttft_p95_ms), "fleet")
        if deployment.slo_ttft_p95_ms
        else Setting(DEFAULT_TTFT_MS, "default")
    )
    settings["sla_percentile"] = Setting(0.95, "fleet")

    price = gpu_hour_price(
        gpu_type=deployment.gpu_type,
        instance_type=deployment.instance_type,
        region=deployment.region,
        day=now.date(),
    )
    if price is None:
        problems.append(
            f"no rate card for {deployment.gpu_type} on {now.date()}: costs not computed"
        )

    scenario = None
    if model:
        values = {k: s.value for k, s in settings.items()}
        values["gpu_hour_price"] = float(price.per_gpu_hour) if price else None
        try:
            scenario = adapters.scenario_with(
                Scenario(model=model, gpu=deployment.gpu_type), values
            )
        except InvalidInput as exc:
            problems.append(str(exc))
        if scenario is not None and settings["max_model_len"].origin == "default":
            scenario = _max_model_len_the_pool_admits(scenario, settings)
    return Today(
        deployment=deployment,
        scenario=scenario,
        settings=settings,
        discovered=config,
        observed_blocks=observed_blocks,
        traffic=traffic,
        price=price,
        problems=tuple(problems),
        engine_figures=engine_figures(deployment),
        pool_source=pool_source,
    )


def _declared_against_discovered(
    declared: dict[str, Any], settings: dict[str, Setting]
) -> list[str]:
    """The fleet file says how the engine was started; its metrics say how it
    runs. Where both speak and differ, the engine wins and the page says so."""
    out = []
    for name, value in declared.items():
        key = "kv_dtype" if name == "kv_cache_dtype" else name
        found = settings.get(key)
        if found is not None and found.origin == "discovered" and found.value != value:
            out.append(
                f"the fleet file declares {name}={value}, the engine reports "
                f"{found.value}: today uses the engine's"
            )
    return out


def _max_model_len_the_pool_admits(
    scenario: Scenario, settings: dict[str, Setting]
) -> Scenario:
    """A running engine whose max_model_len was not reported proves its pool
    holds one request of that length (vLLM refuses to start otherwise), so
    where the model's maximum would not fit the reported pool, today's
    max_model_len is the longest the pool admits, marked inferred. Never a
    model maximum the pool cannot hold."""
    if scenario.num_gpu_blocks_override is None:
        return scenario
    try:
        result = capacity_engine.evaluate(scenario)
    except (CapacityError, InvalidInput):
        return scenario
    if result.refusal != "max_model_len_exceeds_pool":
        return scenario
    admitted = result.max_model_len_admitted
    if admitted < 16:
        return scenario
    settings["max_model_len"] = Setting(admitted, "inferred")
    return replace(scenario, max_model_len=admitted)


def stored_calibrations() -> list[EngineCalibration]:
    return adapters.engine_calibrations(Calibration.objects.all())


def saved_scenarios(limit: int = 200) -> list[SavedScenario]:
    return list(
        SavedScenario.objects.select_related("deployment", "created_by")[:limit]
    )
