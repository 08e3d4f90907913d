"""``manage.py capacity_whatif --deployment chat --set kv_cache_dtype=fp8 [--json]``

Today's configuration of a deployment (as the what-if page pre-fills it) against
one variant, with the same validation as the page: a bad value exits non-zero
naming the field and the value.
"""

from __future__ import annotations

import json
import math
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.http import QueryDict

from costapp.capacity import tables, whatif
from costapp.capacity.forms import VariantForm, field_errors
from costapp.capacity.selectors import deployment_today
from costapp.models import Deployment

# vLLM's flag names are accepted beside the page's field names.
ALIASES = {
    "kv_cache_dtype": "kv_dtype",
    "tensor_parallel_size": "tp",
    "gpu_type": "gpu",
    "quantization": "weight_dtype",
    "target_rps": "target_requests_per_s",
}
OUTPUT_FIELDS = (
    "feasible", "reason", "kv_bytes_per_token", "weights_bytes",
    "kv_cache_memory_bytes", "num_gpu_blocks", "kv_cache_tokens", "max_concurrency",
    "batch_size", "decode_step_ms", "itl_at_percentile_ms", "ttft_ms",
    "throughput_tokens_per_s", "max_requests_per_s_within_sla", "replicas",
    "gpus_needed", "cost_per_hour", "cost_per_1k_requests", "cost_per_1m_tokens",
)  # fmt: skip


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _column(column: whatif.Column) -> dict[str, Any]:
    result = column.result
    out: dict[str, Any] = {"label": column.label, "overrides": column.overrides}
    if result is None:
        out["error"] = column.error
        return out
    out.update({name: _clean(getattr(result, name)) for name in OUTPUT_FIELDS})
    out["currency"] = column.price.currency if column.price else None
    out["calibration"] = {
        "label": result.calibration.label,
        "kind": result.calibration.kind,
        "fit": result.calibration.fit,
    }
    out["warnings"] = list(result.warnings)
    return out


class Command(BaseCommand):
    help = "Evaluate a what-if for a deployment against what runs today."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--deployment", required=True)
        parser.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            help="a change against today, e.g. kv_cache_dtype=fp8 (repeatable)",
        )
        parser.add_argument("--json", action="store_true", help="JSON on stdout")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            deployment = Deployment.objects.get(name=options["deployment"])
        except Deployment.DoesNotExist:
            raise CommandError(
                f"--deployment {options['deployment']!r}: no such deployment"
            ) from None
        data = QueryDict(mutable=True)
        form_fields = set(VariantForm().fields)
        for item in options["set"]:
            name, sep, value = item.partition("=")
            name = ALIASES.get(name.strip(), name.strip())
            if not sep or name not in form_fields:
                raise CommandError(
                    f"--set {item!r}: expected FIELD=VALUE with FIELD one of "
                    f"{', '.join(sorted(form_fields | set(ALIASES)))}"
                )
            data[f"a-{name}"] = value.strip()
        state = deployment_today(deployment)
        if state.scenario is None:
            raise CommandError("; ".join(state.problems))
        form = VariantForm(data, prefix="a")
        if not form.is_valid():
            raise CommandError("; ".join(field_errors(form, "--set")))
        variants = [("a", "Variant", form.overrides())] if form.overrides() else []
        result = whatif.whatif(state, variants)
        for column in result.columns:
            if column.error:
                raise CommandError(f"{column.label}: {column.error}")
        columns = [_column(c) for c in result.columns]
        if options["json"]:
            doc: dict[str, Any] = {
                "deployment": deployment.name,
                "today": columns[0],
                "variant": columns[1] if len(columns) > 1 else None,
                "deltas": {},
                "problems": list(state.problems),
            }
            if len(columns) > 1 and "error" not in columns[1]:
                for name in OUTPUT_FIELDS[2:]:
                    a, b = columns[0].get(name), columns[1].get(name)
                    doc["deltas"][name] = (
                        b - a
                        if isinstance(a, int | float) and isinstance(b, int | float)
                        else None
                    )
            self.stdout.write(json.dumps(doc, indent=2))
            return
        table = tables.whatif_table(result)
        width = max(len(m.label) for m in tables.METRICS) + 2
        self.stdout.write(
            "".ljust(width) + "".join(c.label.rjust(24) for c in result.columns)
        )
        for metric, cells in table.rows:
            line = metric.label.ljust(width)
            for cell in cells:
                text = cell.text + (f" ({cell.delta})" if cell.delta else "")
                line += text.rjust(24) if len(text) < 24 else " " + text
            self.stdout.write(line)
        for column in result.columns:
            if column.result is not None:
                self.stdout.write(
                    f"{column.label}: calibration {column.calibration_label}"
                )
                for warning in column.warnings:
                    self.stdout.write(f"{column.label}: warning: {warning}")
