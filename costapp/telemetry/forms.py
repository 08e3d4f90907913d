from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any

from django import forms

from costapp.models import Deployment


class BackfillForm(forms.Form):
    deployments = forms.ModelMultipleChoiceField(
        queryset=Deployment.objects.exclude(prometheus_selector="").order_by("name"),
        to_field_name="name",
        help_text="Deployments with a Prometheus selector.",
    )
    start = forms.DateField(help_text="UTC day, inclusive")
    end = forms.DateField(help_text="UTC day, exclusive")
    dcgm_selector = forms.CharField(
        required=False,
        max_length=500,
        help_text=(
            "DCGM label matchers for these deployments' GPUs for this run only, "
            'e.g. Hostname="node-a"; empty: each deployment\'s own DCGM selector'
        ),
    )
    scrape_interval_s = forms.FloatField(required=False, min_value=1, max_value=3600)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("start"), data.get("end")
        if start and end and end <= start:
            self.add_error("end", f"end {end} is not after start {start}")
        return data

    def window(self) -> tuple[datetime, datetime]:
        d = self.cleaned_data
        return (
            datetime.combine(d["start"], time(), UTC),
            datetime.combine(d["end"], time(), UTC),
        )
