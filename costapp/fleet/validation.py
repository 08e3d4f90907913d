"""Rules a pool or deployment must satisfy, shared by the fleet file and the admin.

Each checker returns ``(field, message)`` pairs instead of raising, so a caller
can collect every mistake of a file in one pass and name the entry it came from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

import holidays as holidays_lib

from analytics.errors import shown
from costapp.capacity.adapters import KV_DTYPES
from costapp.catalog import GPU_TYPES, mig_slices

# One selector check for every door (re-exported: the fleet tests import it here).
from costapp.sources.promql import SelectorError as SelectorError
from costapp.sources.promql import selector_parse as selector_parse
from costapp.sources.promql import selector_problem
from costapp.validation import name_problem

ENGINES = ("vllm", "sglang", "tgi")
# Engines that run prefill and decode in separate pools (vLLM's KV
# connectors, SGLang's PD disaggregation).
DISAGGREGATED_ENGINES = ("vllm", "sglang")
ALLOCATION_KEYS = ("gpu_hours", "requests")
COST_RULE_KINDS = ("tag", "usage_type", "resource_id")
SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")
Problem = tuple[str, str]


OVERHEAD_KEYS = ("gpu_hours", "requests", "cost")
OVERHEAD_MATCHES = ("usage_type", "tag", "resource_id", "service")


def names_problems(entry: Mapping[str, Any], fields: tuple[str, ...]) -> list[Problem]:
    """The product's one name rule (``validation.name_problem``: no line
    break, control character or bidi override) on these text fields; the
    forms and the admin apply the same."""
    problems: list[Problem] = []
    for field in fields:
        value = entry.get(field)
        problem = name_problem(value) if isinstance(value, str) else None
        if problem:
            problems.append((field, f"{shown(value)}: {problem}"))
    return problems


def overhead_problems(rule: Mapping[str, Any], where: str) -> list[Problem]:
    """A pool's shared overhead: ``{overhead: {usage_type: ...}, key: requests}``
    (optionally ``scope: all`` to spread it over every deployment)."""
    problems: list[Problem] = []
    extra = set(rule) - {"overhead", "key", "scope"}
    if extra:
        problems.append((where, f"unknown field(s) {sorted(extra)} in an overhead"))
    spec = rule.get("overhead")
    if (
        not isinstance(spec, Mapping)
        or len(spec) != 1
        or next(iter(spec)) not in OVERHEAD_MATCHES
    ):
        problems.append(
            (
                f"{where}.overhead",
                f"must be exactly one of {', '.join(OVERHEAD_MATCHES)}; got {spec!r}",
            )
        )
    if rule.get("key", "cost") not in OVERHEAD_KEYS:
        problems.append(
            (
                f"{where}.key",
                f"{rule.get('key')!r} is not one of {', '.join(OVERHEAD_KEYS)}",
            )
        )
    if rule.get("scope") not in (None, "all"):
        problems.append((f"{where}.scope", f"{rule.get('scope')!r} is not 'all'"))
    return problems


def cost_rules_problems(
    rules: Any, field: str = "cost_rules", *, allow_overheads: bool = False
) -> list[Problem]:
    if rules is None:
        return []
    if not isinstance(rules, list):
        return [(field, f"must be a list, got {type(rules).__name__}")]
    problems: list[Problem] = []
    for i, rule in enumerate(rules):
        where = f"{field}[{i}]"
        if allow_overheads and isinstance(rule, Mapping) and "overhead" in rule:
            problems += overhead_problems(rule, where)
            continue
        if not isinstance(rule, Mapping) or len(rule) != 1:
            problems.append(
                (
                    where,
                    "must be exactly one of {tag: {key, value}}, {usage_type: ...}, "
                    f"{{resource_id: ...}}; got {rule!r}",
                )
            )
            continue
        ((kind, value),) = rule.items()
        if kind not in COST_RULE_KINDS:
            problems.append(
                (where, f"unknown rule {kind!r} (known: {', '.join(COST_RULE_KINDS)})")
            )
        elif kind == "tag":
            if (
                not isinstance(value, Mapping)
                or set(value) != {"key", "value"}
                or not all(isinstance(v, str) and v for v in value.values())
            ):
                problems.append(
                    (where, f"tag needs a non-empty 'key' and 'value', got {value!r}")
                )
        elif not isinstance(value, str) or not value:
            problems.append(
                (where, f"{kind} must be a non-empty string, got {value!r}")
            )
    return problems


def gpu_problems(
    gpu_type: Any, mig_profile: Any, tensor_parallel_size: Any
) -> list[Problem]:
    problems: list[Problem] = []
    if gpu_type not in GPU_TYPES:
        problems.append(
            (
                "gpu_type",
                f"{gpu_type!r} is not a known GPU type (known: {', '.join(GPU_TYPES)})",
            )
        )
        return problems
    if mig_profile:
        offered = GPU_TYPES[gpu_type]
        if mig_profile not in offered:
            problems.append(
                (
                    "mig_profile",
                    f"{mig_profile!r} is not a MIG profile of {gpu_type} "
                    f"(offered: {', '.join(offered) or 'none, no MIG'})",
                )
            )
        elif isinstance(tensor_parallel_size, int) and tensor_parallel_size > 1:
            problems.append(
                (
                    "tensor_parallel_size",
                    f"{tensor_parallel_size} on MIG instance {mig_profile}: tensor "
                    "parallelism across MIG instances is not possible (use 1)",
                )
            )
    return problems


# Beyond any deployment or node that exists (a rack-scale NVL72 is 72 GPUs); an
# SLO beyond an hour is a typo for seconds.
MAX_GPUS = 4096
MAX_GPUS_PER_NODE = 1024
MAX_SLO_MS = 3_600_000


def _positive_int(value: Any, field: str, maximum: int) -> list[Problem]:
    """A count within what the product takes on any database (SQLite puts no
    range on an integer column, PostgreSQL's smallint stops at 32,767)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return [(field, f"must be a positive integer, got {value!r}")]
    if value > maximum:
        return [(field, f"must be at most {maximum:,}, got {value!r}")]
    return []


def _share(value: Any, field: str) -> list[Problem]:
    """A fraction in (0, 1]; ``1.5`` and ``70`` (a percentage) are refused."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= 1
    ):
        return [(field, f"{value!r} must be a number in (0, 1], e.g. 0.7 for 70%")]
    return []


# The serving arguments a fleet file may declare, by vLLM's own names (``vllm
# serve --max-model-len`` is ``max_model_len`` here): kind and bounds.
SERVING_ARGS: dict[str, tuple[str, float, float]] = {
    "max_model_len": ("int", 16, 10_000_000),
    "max_num_seqs": ("int", 1, 65_536),
    "max_num_batched_tokens": ("int", 1, 10_000_000),
    "block_size": ("int", 1, 256),
    "gpu_memory_utilization": ("share", 0, 1),
    "kv_cache_dtype": ("kv_dtype", 0, 0),
    "enforce_eager": ("bool", 0, 0),
}


def prefill_problems(entry: Mapping[str, Any]) -> list[Problem]:
    """A disaggregated deployment's prefill engines are picked among the
    series its own selector reads: without that selector there is nothing
    to split, and an engine without prefill/decode disaggregation (TGI)
    has no prefill pool."""
    prefill = entry.get("prefill_selector") or ""
    if not isinstance(prefill, str) or not prefill.strip():
        return []
    if not (entry.get("prometheus_selector") or "").strip():
        return [
            (
                "prefill_selector",
                f"{shown(prefill)}: needs a prometheus_selector matching both "
                "the prefill and the decode engines",
            )
        ]
    engine = entry.get("engine", "vllm")
    if engine not in DISAGGREGATED_ENGINES:
        return [
            (
                "prefill_selector",
                f"{shown(prefill)}: engine {engine!r} has no prefill/decode "
                f"disaggregation (only {', '.join(DISAGGREGATED_ENGINES)})",
            )
        ]
    return []


def serving_problems(serving: Any) -> list[Problem]:
    """A deployment's declared serving arguments, each strictly typed: a
    string "8192" or a true/false where a number goes is refused, named."""
    if serving is None:
        return []
    if not isinstance(serving, Mapping):
        return [
            (
                "serving",
                f"must be a mapping of vLLM serving arguments, got {shown(serving)}",
            )
        ]
    problems: list[Problem] = []
    for key, value in serving.items():
        field = f"serving.{key}"
        spec = SERVING_ARGS.get(str(key))
        if spec is None:
            hint = str(key).replace("-", "_").lstrip("_")
            known = ", ".join(sorted(SERVING_ARGS))
            problems.append(
                (
                    field,
                    "is not a serving argument costapp reads"
                    + (f" (did you mean {hint}?)" if hint in SERVING_ARGS else "")
                    + f"; known: {known}",
                )
            )
            continue
        kind, low, high = spec
        if kind == "bool":
            if not isinstance(value, bool):
                problems.append((field, f"must be true or false, got {shown(value)}"))
        elif kind == "kv_dtype":
            if value not in KV_DTYPES:
                problems.append(
                    (field, f"{shown(value)} is not one of {', '.join(KV_DTYPES)}")
                )
        elif kind == "share":
            problems += _share(value, field)
        elif isinstance(value, bool) or not isinstance(value, int):
            problems.append((field, f"must be a whole number, got {shown(value)}"))
        elif not low <= value <= high:
            problems.append(
                (field, f"must be between {low:,.0f} and {high:,.0f}, got {value:,}")
            )
    return problems


def deployment_problems(
    entry: Mapping[str, Any], *, pools: Mapping[str, str] | None
) -> list[Problem]:
    """Problems of one deployment given as fleet-file fields.

    ``pools`` maps known pool names to their GPU type; None skips the check.
    """
    problems: list[Problem] = []
    name = entry.get("name")
    if not isinstance(name, str) or not SLUG.match(name):
        problems.append(
            ("name", f"must be a slug (letters, digits, - _), got {name!r}")
        )
    for field in ("model",):
        if not isinstance(entry.get(field), str) or not entry.get(field):
            problems.append((field, "is required"))
    problems += names_problems(entry, ("team", "model"))
    engine = entry.get("engine", "vllm")
    if engine not in ENGINES:
        problems.append(("engine", f"{engine!r} is not one of {', '.join(ENGINES)}"))
    gpu_count = entry.get("gpu_count", 1)
    tp = entry.get("tensor_parallel_size", 1)
    problems += _positive_int(gpu_count, "gpu_count", MAX_GPUS)
    problems += _positive_int(tp, "tensor_parallel_size", MAX_GPUS)
    mig = entry.get("mig_profile") or ""
    problems += gpu_problems(entry.get("gpu_type"), mig, tp)
    if mig and isinstance(mig, str):
        try:
            mig_slices(mig)
        except ValueError as exc:
            problems.append(("mig_profile", str(exc)))
    if (
        not mig
        and isinstance(tp, int)
        and isinstance(gpu_count, int)
        and not isinstance(tp, bool)
        and tp > gpu_count
    ):
        problems.append(
            (
                "tensor_parallel_size",
                f"{tp} is larger than gpu_count {gpu_count}: a replica cannot "
                "span more GPUs than it has",
            )
        )
    for field in ("prometheus_selector", "dcgm_selector", "prefill_selector"):
        problem = selector_problem(entry.get(field) or "")
        if problem is not None:
            problems.append((field, problem))
    problems += prefill_problems(entry)
    problems += cost_rules_problems(entry.get("cost_rules"))
    problems += serving_problems(entry.get("serving"))
    if "target_utilisation" in entry:
        problems += _share(entry["target_utilisation"], "target_utilisation")
    pool = entry.get("pool")
    if pool and pools is not None:
        if pool not in pools:
            problems.append(
                (
                    "pool",
                    f"{pool!r} is not a pool of this fleet "
                    f"(pools: {', '.join(sorted(pools)) or 'none'})",
                )
            )
        elif entry.get("gpu_type") in GPU_TYPES and pools[pool] != entry.get(
            "gpu_type"
        ):
            problems.append(
                (
                    "pool",
                    f"pool {pool!r} has {pools[pool]} GPUs, the deployment says "
                    f"{entry.get('gpu_type')!r}",
                )
            )
    slo = entry.get("slo") or {}
    if not isinstance(slo, Mapping):
        problems.append(("slo", f"must be a mapping, got {slo!r}"))
    else:
        for key in slo:
            if key not in ("ttft_p95_ms", "itl_p95_ms"):
                problems.append(
                    (f"slo.{key}", "unknown (known: ttft_p95_ms, itl_p95_ms)")
                )
            else:
                problems += _positive_int(slo[key], f"slo.{key}", MAX_SLO_MS)
    return problems


def pool_problems(entry: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    name = entry.get("name")
    if not isinstance(name, str) or not SLUG.match(name):
        problems.append(
            ("name", f"must be a slug (letters, digits, - _), got {name!r}")
        )
    if not isinstance(entry.get("instance_type"), str) or not entry.get(
        "instance_type"
    ):
        problems.append(("instance_type", "is required"))
    gpu_type = entry.get("gpu_type")
    if gpu_type not in GPU_TYPES:
        problems.append(
            (
                "gpu_type",
                f"{gpu_type!r} is not a known GPU type (known: {', '.join(GPU_TYPES)})",
            )
        )
    problems += _positive_int(
        entry.get("gpus_per_node", 8), "gpus_per_node", MAX_GPUS_PER_NODE
    )
    key = entry.get("allocation_key", "gpu_hours")
    if key not in ALLOCATION_KEYS:
        problems.append(
            ("allocation_key", f"{key!r} is not one of {', '.join(ALLOCATION_KEYS)}")
        )
    problems += cost_rules_problems(entry.get("cost_rules"), allow_overheads=True)
    return problems


HOLIDAY_FIELDS = ("team", "country", "subdiv", "day", "name")
ALL_TEAMS = "*"


def holiday_problems(entry: Mapping[str, Any], *, teams: set[str]) -> list[Problem]:
    """One ``holidays:`` entry: ``{team, country, subdiv}`` (the public
    holidays of a country the ``holidays`` package knows) or ``{team, day,
    name}`` (a day the user keeps). ``team`` is a team of a deployment in the
    file or ``*`` (every team, the default)."""
    problems: list[Problem] = []
    for key in entry:
        if key not in HOLIDAY_FIELDS:
            problems.append((str(key), f"unknown (known: {', '.join(HOLIDAY_FIELDS)})"))
    team = entry.get("team", ALL_TEAMS)
    if not isinstance(team, str) or (team != ALL_TEAMS and team not in teams):
        problems.append(
            (
                "team",
                f"{team!r} is not a team of a deployment in this file "
                f"(teams: {', '.join(sorted(teams)) or 'none'}; '*' for every team)",
            )
        )
    country, day = entry.get("country"), entry.get("day")
    if (country is None) == (day is None):
        problems.append(("country", "give either a country or a day, not both"))
        return problems
    if country is not None:
        supported = holidays_lib.list_supported_countries()
        if not isinstance(country, str) or country not in supported:
            problems.append(
                (
                    "country",
                    f"{country!r} is not an ISO country the holidays package knows",
                )
            )
            return problems
        subdiv = entry.get("subdiv")
        if subdiv is not None and str(subdiv) not in supported[country]:
            problems.append(
                (
                    "subdiv",
                    f"{subdiv!r} is not a subdivision of {country} "
                    f"(known: {', '.join(supported[country][:12]) or 'none'}"
                    f"{', ...' if len(supported[country]) > 12 else ''})",
                )
            )
        if "name" in entry:
            problems.append(("name", "names a day; a country's days are named by it"))
        return problems
    if "subdiv" in entry:
        problems.append(("subdiv", "belongs with a country, not a day"))
    if isinstance(day, datetime) or not isinstance(day, date | str):
        problems.append(("day", f"must be a date (YYYY-MM-DD), got {day!r}"))
    elif isinstance(day, str):
        try:
            date.fromisoformat(day)
        except ValueError:
            problems.append(("day", f"must be a date (YYYY-MM-DD), got {day!r}"))
    name = entry.get("name", "")
    if not isinstance(name, str) or len(name) > 100:
        problems.append(
            ("name", f"must be text of at most 100 characters, got {name!r}")
        )
    else:
        problems += names_problems(entry, ("name",))
    return problems
