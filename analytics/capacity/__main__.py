"""CLI: ``python -m analytics.capacity [scenario.json]`` (stdin when no file).

Reads one JSON scenario (fields of ``Scenario``, plus optional ``calibrations``:
a list of calibration file paths) and writes the result as JSON on stdout.
``model`` is a catalogue name or, for a model outside the catalogue, an object
holding the fields of its Hugging Face ``config.json`` (``name`` optional); see
docs/capacity.md.

Exit codes: 0 ok, 2 invalid input or a configuration vLLM refuses (the message
names the field and the value, and quotes vLLM's reason), 3 infeasible (it
starts, but no batch meets the SLA or one request does not fit).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from analytics.capacity.calibration import load_calibration
from analytics.capacity.catalog import model_from_hf_config
from analytics.capacity.engine import Scenario, evaluate
from analytics.capacity.errors import CapacityError, Refused
from analytics.errors import InvalidInput

EXIT_OK, EXIT_INVALID, EXIT_INFEASIBLE = 0, 2, 3

OUTPUT_FIELDS = (
    "feasible", "reason", "kv_bytes_per_token", "weights_bytes", "activation_bytes",
    "non_torch_bytes", "cuda_graph_bytes", "kv_cache_memory_bytes", "num_gpu_blocks",
    "kv_cache_tokens", "max_concurrency", "max_concurrency_at_max_model_len",
    "max_num_seqs", "max_num_batched_tokens", "batch_size", "decode_step_ms",
    "itl_mean_ms", "itl_at_percentile_ms", "prefill_ms", "ttft_ms",
    "throughput_tokens_per_s", "max_requests_per_s_within_sla", "replicas",
    "gpus_needed", "cost_per_hour", "cost_per_1k_requests", "cost_per_1m_tokens",
    "cost_per_1m_output_tokens", "gpu_memory_gb",
)  # fmt: skip


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def run(document: Any) -> tuple[int, dict[str, Any]]:
    if not isinstance(document, dict):
        raise InvalidInput(
            "<document>", type(document).__name__, "must be a JSON object"
        )
    doc = dict(document)
    paths = doc.pop("calibrations", []) or []
    if not isinstance(paths, list):
        raise InvalidInput("calibrations", paths, "must be a list of file paths")
    known = {f.name for f in fields(Scenario)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise InvalidInput(unknown[0], doc[unknown[0]], "unknown scenario field")
    for required in ("model", "gpu"):
        if required not in doc:
            raise InvalidInput(required, None, "required")
    if isinstance(doc["model"], dict):
        config = dict(doc["model"])
        name = config.pop("name", None)
        doc["model"] = model_from_hf_config(config, name=str(name or ""))
    elif not isinstance(doc["model"], str):
        raise InvalidInput(
            "model",
            doc["model"],
            "must be a catalogue name or an object of config.json fields",
        )
    calibrations = [load_calibration(p) for p in paths]
    result = evaluate(Scenario(**doc), calibrations=calibrations)
    out = {name: _clean(getattr(result, name)) for name in OUTPUT_FIELDS}
    out["starts"] = result.starts
    out["refusal"] = result.refusal
    out["modelled"] = result.modelled
    out["calibration"] = {
        "label": result.calibration.label,
        "kind": result.calibration.kind,
        "fit": result.calibration.fit,
    }
    out["warnings"] = list(result.warnings)
    if not result.starts:
        # vLLM refuses to start (after profiling): the same exit as a config refusal.
        return EXIT_INVALID, out
    return (EXIT_OK if result.feasible else EXIT_INFEASIBLE), out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analytics.capacity")
    parser.add_argument(
        "scenario", nargs="?", help="scenario JSON file (default stdin)"
    )
    args = parser.parse_args(argv)
    try:
        text = (
            open(args.scenario, encoding="utf-8").read()
            if args.scenario
            else sys.stdin.read()
        )
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInput(
                "<document>", text[:40], f"not valid JSON: {exc.msg}"
            ) from exc
        code, out = run(document)
    except InvalidInput as exc:
        error: dict[str, Any] = {
            "error": "refused" if isinstance(exc, Refused) else "invalid_input",
            "field": exc.field,
            "value": _clean(exc.value)
            if isinstance(exc.value, int | float | str)
            else repr(exc.value),
            "message": str(exc),
        }
        if isinstance(exc, Refused):
            error["refusal"] = exc.code
            error["vllm_reason"] = exc.reason
            error["vllm_source"] = exc.source
        json.dump(error, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_INVALID
    except (CapacityError, TypeError, ValueError) as exc:
        # Anything else the document gets wrong: a message, never a traceback.
        json.dump(
            {"error": "invalid_input", "field": "<document>", "message": str(exc)},
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
        return EXIT_INVALID
    except OSError as exc:
        json.dump(
            {
                "error": "invalid_input",
                "field": "scenario",
                "value": args.scenario,
                "message": str(exc),
            },
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
        return EXIT_INVALID
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return code


if __name__ == "__main__":  # pragma: no cover
    try:
        raise SystemExit(main())
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: nothing left to report to.
        sys.stderr.close()
        raise SystemExit(EXIT_OK) from None
