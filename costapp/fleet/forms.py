"""Admin forms that hold edits to the same rules as the fleet file."""

from __future__ import annotations

from typing import Any

from costapp.fleet.validation import deployment_problems
from costapp.forms import NamedModelForm
from costapp.models import Deployment, Pool

# Fleet-file field -> model field, where they differ.
_MODEL_FIELD = {
    "model": "model_name",
    "slo.ttft_p95_ms": "slo_ttft_p95_ms",
    "slo.itl_p95_ms": "slo_itl_p95_ms",
}


class DeploymentForm(NamedModelForm):
    class Meta:
        model = Deployment
        fields = [
            "name",
            "team",
            "engine",
            "engine_version",
            "model_name",
            "gpu_type",
            "gpu_count",
            "tensor_parallel_size",
            "mig_profile",
            "instance_type",
            "region",
            "account_id",
            "prometheus_selector",
            "dcgm_selector",
            "prefill_selector",
            "cost_rules",
            "pool",
            "slo_ttft_p95_ms",
            "slo_itl_p95_ms",
            "target_utilisation",
        ]
        help_texts = {
            "target_utilisation": (
                "Share of the predicted capacity a replica should run at, in "
                "(0, 1]; headroom idle is measured below it (0.7 = 70%)."
            )
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        pool = data.get("pool")
        slo = {
            k: v
            for k, v in (
                ("ttft_p95_ms", data.get("slo_ttft_p95_ms")),
                ("itl_p95_ms", data.get("slo_itl_p95_ms")),
            )
            if v is not None
        }
        entry = {
            "name": data.get("name"),
            "model": data.get("model_name"),
            "engine": data.get("engine"),
            "gpu_type": data.get("gpu_type"),
            "gpu_count": data.get("gpu_count"),
            "tensor_parallel_size": data.get("tensor_parallel_size"),
            "mig_profile": data.get("mig_profile") or "",
            "prometheus_selector": data.get("prometheus_selector") or "",
            "dcgm_selector": data.get("dcgm_selector") or "",
            "prefill_selector": data.get("prefill_selector") or "",
            "cost_rules": data.get("cost_rules") or [],
            "pool": pool.name if pool else None,
            "slo": slo,
        }
        if data.get("target_utilisation") is not None:
            entry["target_utilisation"] = data["target_utilisation"]
        pools = dict(Pool.objects.values_list("name", "gpu_type"))
        for field, message in deployment_problems(entry, pools=pools):
            model_field = _MODEL_FIELD.get(field, field.split("[", 1)[0])
            if model_field in self.fields and model_field not in self.errors:
                self.add_error(model_field, f"{field} {message}")
            elif model_field not in self.fields:
                self.add_error(None, f"{field} {message}")
        return data
