"""Forms of the capacity pages; every error names the field and the value sent."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from analytics.errors import InvalidInput, shown
from costapp.capacity import adapters
from costapp.forms import NamedErrors, NamedForm
from costapp.models import Deployment
from costapp.validation import json_in

_VERSION = re.compile(r"^v?\d+\.\d+(\.\d+)?([.+-]?[\w.]*)?$")
NONE = "none"  # "whole GPU" in the MIG select


def field_errors(form: NamedErrors, label: str = "") -> list[str]:
    """Form errors as sentences naming the column, the field (its label too)
    and the value."""
    out: list[str] = []
    prefix = f"{label} · " if label else ""
    for name, errors in form.errors.items():
        if name == "__all__":
            out.extend(f"{prefix}{e}" for e in errors)
            continue
        field = form.fields.get(name)
        raw = form.data.get(form.add_prefix(name), "")
        title = field.label if field and field.label else name
        for error in map(str, errors):
            # Named here with the field's title: without NamedErrors' naming.
            reason = form.reason(name, error)
            out.append(f"{prefix}{title} ({name}) = {raw!r}: {reason}")
    return out


def _choices(
    values: list[str] | tuple[str, ...], blank: str = ""
) -> list[tuple[str, str]]:
    return [("", blank), *((v, v) for v in values)]


def _all_mig_profiles() -> list[str]:
    seen: dict[str, None] = {}
    for gpu in adapters.catalogue_gpus():
        for profile in adapters.mig_profiles_of(gpu):
            seen.setdefault(profile, None)
    return list(seen)


# ASCII digits only (re.ASCII: \d alone matches full-width digits too).
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)


def _plain_number(value: Any, example: str) -> Any:
    # Django's number fields call int()/float(), which also take "1_000",
    # full-width or Arabic-Indic digits and "Infinity": not what a user meant.
    if (
        isinstance(value, str)
        and value.strip()
        and not _PLAIN_NUMBER.fullmatch(value.strip())
    ):
        raise forms.ValidationError(f"Enter a plain number such as {example}.")
    return value


class IntegerField(forms.IntegerField):
    def to_python(self, value: Any) -> int | None:
        return super().to_python(_plain_number(value, "64"))


class FloatField(forms.FloatField):
    def to_python(self, value: Any) -> float | None:  # type: ignore[override]
        return super().to_python(_plain_number(value, "0.9"))


class VariantForm(NamedForm):
    """One what-if column: a blank field keeps today's value."""

    kv_dtype = forms.ChoiceField(label="KV-cache dtype", required=False)
    max_model_len = IntegerField(
        label="max_model_len", required=False, min_value=16, max_value=10_000_000
    )
    max_num_seqs = IntegerField(
        label="max_num_seqs", required=False, min_value=1, max_value=65_536
    )
    max_num_batched_tokens = IntegerField(
        label="max_num_batched_tokens",
        required=False,
        min_value=1,
        max_value=10_000_000,
    )
    gpu_memory_utilization = FloatField(
        label="gpu_memory_utilization", required=False, min_value=0.05, max_value=0.99
    )
    block_size = forms.TypedChoiceField(
        label="Block size",
        required=False,
        coerce=int,
        empty_value=None,
        choices=_choices(["8", "16", "32", "64", "128"]),
    )
    enforce_eager = forms.TypedChoiceField(
        label="enforce_eager",
        required=False,
        empty_value=None,
        coerce=lambda v: v == "true",
        choices=[("", ""), ("true", "yes"), ("false", "no")],
    )
    tp = forms.TypedChoiceField(
        label="Tensor parallel",
        required=False,
        coerce=int,
        empty_value=None,
        choices=_choices(["1", "2", "4", "8"]),
    )
    weight_dtype = forms.ChoiceField(label="Weights", required=False)
    engine_version = forms.CharField(
        label="vLLM version", required=False, max_length=32
    )
    gpu = forms.ChoiceField(label="GPU type", required=False)
    mig_profile = forms.ChoiceField(label="MIG profile", required=False)
    target_requests_per_s = FloatField(
        label="Target req/s", required=False, min_value=0.0001, max_value=1_000_000
    )
    prompt_tokens = IntegerField(
        label="Prompt tokens", required=False, min_value=1, max_value=10_000_000
    )
    output_tokens = IntegerField(
        label="Output tokens", required=False, min_value=1, max_value=1_000_000
    )
    itl_sla_ms = FloatField(
        label="ITL SLA (ms)", required=False, min_value=0.1, max_value=1_000_000
    )
    ttft_sla_ms = FloatField(
        label="TTFT SLA (ms)", required=False, min_value=0.1, max_value=10_000_000
    )
    sla_percentile = forms.TypedChoiceField(
        label="SLA percentile",
        required=False,
        coerce=float,
        empty_value=None,
        choices=[
            ("", ""),
            ("0.5", "p50"),
            ("0.9", "p90"),
            ("0.95", "p95"),
            ("0.99", "p99"),
        ],
    )

    def __init__(
        self, *args: Any, today: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        same = "= today"
        self.fields["kv_dtype"].choices = _choices(adapters.KV_DTYPES, same)  # type: ignore[attr-defined]
        self.fields["weight_dtype"].choices = _choices(adapters.WEIGHT_DTYPES, same)  # type: ignore[attr-defined]
        self.fields["gpu"].choices = _choices(adapters.catalogue_gpus(), same)  # type: ignore[attr-defined]
        self.fields["mig_profile"].choices = [  # type: ignore[attr-defined]
            ("", same),
            (NONE, "whole GPU"),
            *((p, p) for p in _all_mig_profiles()),
        ]
        for name in ("block_size", "tp", "enforce_eager", "sla_percentile"):
            choices = list(self.fields[name].choices)  # type: ignore[attr-defined]
            self.fields[name].choices = [("", same), *choices[1:]]  # type: ignore[attr-defined]
        # Blank keeps today's value: show it as the placeholder.
        for name, value in (today or {}).items():
            field = self.fields.get(name)
            if (
                field is not None
                and value is not None
                and isinstance(field.widget, forms.NumberInput | forms.TextInput)
            ):
                field.widget.attrs["placeholder"] = str(value)
        for field in self.fields.values():
            field.widget.attrs.setdefault("class", "cell")

    def clean_engine_version(self) -> str:
        value = (self.cleaned_data.get("engine_version") or "").strip()
        if value and not _VERSION.match(value):
            raise forms.ValidationError("expected a vLLM version such as 0.10.1")
        return value

    def overrides(self) -> dict[str, Any]:
        """The fields the user set, as engine scenario fields."""
        out: dict[str, Any] = {}
        for name, value in self.cleaned_data.items():
            if value is None or value == "":
                continue
            if name == "mig_profile":
                out[name] = None if value == NONE else value
                continue
            out[name] = value
        return out


VARIANT_KEYS = (("a", "Variant A"), ("b", "Variant B"), ("c", "Variant C"))


class SaveScenarioForm(NamedForm):
    name = forms.CharField(max_length=200)
    query = forms.CharField(required=False, max_length=4000, widget=forms.HiddenInput)


class SimulateForm(NamedForm):
    column = forms.ChoiceField(
        choices=[("today", "today"), *((k, k) for k, _ in VARIANT_KEYS)]
    )


# A GPU holds at most 7 MIG instances (A100/H100/H200/B200 all cap at 7
# compute slices), so a layout longer than that cannot exist; a bound here
# keeps "1000000x1g" from building a million-entry list.
MAX_MIG_PARTS = 7
MAX_LAYOUTS = 20


LayoutPart = tuple[str, str | None]  # (profile, deployment or None: unassigned)
_ASSIGNED = re.compile(r"^(.+?):([a-z0-9][a-z0-9_-]{0,99})$", re.IGNORECASE)


def _parse_layouts(text: str) -> list[list[LayoutPart]]:
    """One layout a line: profiles joined by +, a count as 7x1g, and an
    instance optionally given to a deployment (``3g:code-assist``) so several
    deployments can share one GPU's slices."""
    layouts = []
    for line in text.replace(";", "\n").splitlines():
        line = line.strip()
        if not line:
            continue
        parts: list[LayoutPart] = []
        for token in line.replace(" ", "").split("+"):
            assigned = _ASSIGNED.match(token)
            name = assigned.group(2) if assigned else None
            token = assigned.group(1) if assigned else token
            match = re.match(r"^(\d+)\s*[x\u00d7*]\s*(.+)$", token)
            count_text = match.group(1).lstrip("0") if match else ""
            # At most 4 digits parsed: 5,000 of them must not reach int().
            count = int(count_text[:4] or "0")
            if match and count == 0:
                raise forms.ValidationError(
                    f"layouts={shown(token)}: 0 instances; a count is at least 1"
                )
            if match and count > MAX_MIG_PARTS:
                raise forms.ValidationError(
                    f"layouts={shown(token)}: {count_text[:20]} instances; a GPU "
                    f"holds at most {MAX_MIG_PARTS}"
                )
            if match:
                token = match.group(2)
            elif not token:
                continue
            if not re.fullmatch(r"[\w.]{1,32}", token):
                raise forms.ValidationError(
                    f"layouts={shown(token)}: not a MIG profile such as 3g or "
                    "3g.40gb, nor a count such as 7x1g, optionally with "
                    ":deployment"
                )
            parts.extend([(token, name)] * (count if match else 1))
            if len(parts) > MAX_MIG_PARTS:
                raise forms.ValidationError(
                    f"layouts={shown(line)}: {len(parts)} instances; a GPU holds "
                    f"at most {MAX_MIG_PARTS}"
                )
        layouts.append(parts)
        if len(layouts) > MAX_LAYOUTS:
            raise forms.ValidationError(
                f"layouts={shown(text)}: more than {MAX_LAYOUTS} layouts"
            )
    return layouts


def mig_profile_for(gpu: str, short: str) -> str:
    """``3g`` -> the GPU's 3g profile; ambiguous short names take the smallest
    memory (``1g`` is ``1g.10gb`` on H100, as in NVIDIA's layout tables)."""
    profiles = adapters.mig_profiles_of(gpu)
    if short in profiles:
        return short
    if re.fullmatch(r"\d+g", short):
        matches = [p for p in profiles if p.startswith(short + ".")]
        if matches:
            return matches[0]
    raise forms.ValidationError(
        f"{short!r} is not a MIG profile of {gpu} (known: {', '.join(profiles)})"
    )


DEFAULT_LAYOUTS = "7g\n4g+3g\n3g+2g+2g\n3g+2g+1g+1g\n7x1g\n4g+4g"


class MigCompareForm(NamedForm):
    gpu = forms.ChoiceField(label="GPU")
    layouts = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "cols": 28}),
        initial=DEFAULT_LAYOUTS,
        help_text="one layout a line: 4g+3g, 3g.40gb+2g.20gb+2g.20gb, 7x1g; give "
        "instances to deployments to share a GPU: 3g:code-assist+2x2g:moderation",
    )
    deployments = forms.ModelMultipleChoiceField(
        queryset=Deployment.objects.all(),
        to_field_name="name",
        widget=forms.SelectMultiple(attrs={"size": 6}),
        required=False,
        help_text="each runs one replica per instance of the unassigned layouts",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        gpus = [g for g in adapters.catalogue_gpus() if adapters.mig_profiles_of(g)]
        self.fields["gpu"].choices = [(g, g) for g in gpus]  # type: ignore[attr-defined]
        fleet = adapters.fleet_mig_gpu(gpus)
        if fleet:
            self.fields["gpu"].initial = fleet

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        gpu = data.get("gpu")
        text = data.get("layouts")
        if not (gpu and text):
            return data
        try:
            layouts = _parse_layouts(text)
            resolved = [
                [(mig_profile_for(gpu, p), name) for p, name in layout]
                for layout in layouts
            ]
        except forms.ValidationError as exc:
            self.add_error("layouts", exc)
            return data
        names = {n for layout in resolved for _, n in layout if n}
        known = set(
            Deployment.objects.filter(name__in=names).values_list("name", flat=True)
        )
        for name in sorted(names - known):
            self.add_error(
                "layouts", f"layouts={shown(name)}: no deployment of that name"
            )
        shared = [layout for layout in resolved if any(n for _, n in layout)]
        alone = [[p for p, _ in layout] for layout in resolved if layout not in shared]
        if alone and not data.get("deployments"):
            self.add_error(
                "deployments",
                "choose at least one deployment for the layouts whose instances "
                "name none (or give each instance one: 3g:code-assist)",
            )
        data["layout_list"] = alone
        data["shared_list"] = shared
        return data


SEARCH_FIELDS: dict[str, tuple[str, type]] = {
    "kv_dtype": ("KV-cache dtype", str),
    "max_model_len": ("max_model_len", int),
    "max_num_seqs": ("max_num_seqs", int),
    "max_num_batched_tokens": ("max_num_batched_tokens", int),
    "gpu_memory_utilization": ("gpu_memory_utilization", float),
    "block_size": ("Block size", int),
    "tp": ("Tensor parallel", int),
    "weight_dtype": ("Weights", str),
    "gpu": ("GPU type", str),
    "mig_profile": ("MIG profile (none = whole GPU)", str),
}
MAX_COMBINATIONS = 20_000


def _search_choice_refused(field: forms.Field, raw: str) -> str | None:
    """Why ``raw`` is not a choice for ``field`` (None: it is one)."""
    try:
        value = field.clean(raw)
    except forms.ValidationError as exc:
        return " ".join(str(m) for m in exc.messages)
    if value is None or value == "":
        return "not a choice"
    return None


class SearchForm(NamedForm):
    deployment = forms.ModelChoiceField(
        queryset=Deployment.objects.all(), to_field_name="name"
    )
    objective = forms.ChoiceField(
        choices=[
            ("cost_per_1k_requests", "min $ per 1k requests"),
            ("cost_per_1m_tokens", "min $ per 1M tokens"),
            ("p95_latency_s", "min p95 latency"),
            (
                "seed_weighted",
                "seed's weighted objective (0.6 latency, 0.3 memory, 0.1 cost)",
            ),
        ],
        initial="cost_per_1k_requests",
    )
    max_gpus = FloatField(
        required=False, min_value=0.01, max_value=1_000_000, label="At most GPUs"
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, (label, _) in SEARCH_FIELDS.items():
            self.fields[f"space_{name}"] = forms.CharField(
                label=label,
                required=False,
                max_length=500,
                help_text="comma-separated choices",
            )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        space: dict[str, list[Any]] = {}
        combos = 1
        # Each choice is cleaned by the what-if's field of the same name: the
        # same bounds, choices and plain ASCII numbers.
        cells = VariantForm().fields
        for name in SEARCH_FIELDS:
            text = (data.get(f"space_{name}") or "").strip()
            if not text:
                continue
            values: list[Any] = []
            for raw in (t.strip() for t in text.split(",")):
                if not raw:
                    continue
                if name == "mig_profile" and raw.lower() == NONE:
                    values.append(None)
                    continue
                refused = _search_choice_refused(cells[name], raw)
                if refused:
                    self.add_error(
                        f"space_{name}", f"{shown(raw)} (in {name}): {refused}"
                    )
                    return data
                values.append(cells[name].clean(raw))
            space[name] = values
            combos *= len(values)
        if any(f"space_{name}" in self.errors for name in SEARCH_FIELDS):
            return data  # a field refused on its own (too long, a NUL byte)
        if not space:
            raise forms.ValidationError("declare choices for at least one parameter")
        if combos > MAX_COMBINATIONS:
            raise forms.ValidationError(
                f"the space has {combos:,} combinations; at most "
                f"{MAX_COMBINATIONS:,} are searched from this page"
            )
        data["space"] = space
        return data


class CalibrationUploadForm(NamedForm):
    file = forms.FileField(
        help_text="calibration JSON, or vllm bench serve/latency result JSON"
    )
    gpu = forms.ChoiceField(label="GPU", required=False)
    mig_profile = forms.CharField(label="MIG profile", required=False, max_length=32)
    model = forms.ChoiceField(label="Model", required=False)
    weight_dtype = forms.ChoiceField(label="Weights", required=False)
    kv_dtype = forms.ChoiceField(label="KV-cache dtype", required=False)
    tp = IntegerField(
        label="Tensor parallel", required=False, min_value=1, max_value=64
    )
    engine_version = forms.CharField(
        label="vLLM version", required=False, max_length=32
    )
    batch_size = IntegerField(
        required=False,
        min_value=1,
        max_value=65_536,
        help_text="vllm bench latency only",
    )
    input_len = IntegerField(
        required=False,
        min_value=1,
        max_value=10_000_000,
        help_text="vllm bench latency only",
    )
    output_len = IntegerField(
        required=False,
        min_value=1,
        max_value=1_000_000,
        help_text="vllm bench latency only",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["gpu"].choices = _choices(adapters.catalogue_gpus())  # type: ignore[attr-defined]
        self.fields["model"].choices = _choices(adapters.catalogue_models())  # type: ignore[attr-defined]
        self.fields["weight_dtype"].choices = _choices(adapters.WEIGHT_DTYPES)  # type: ignore[attr-defined]
        self.fields["kv_dtype"].choices = _choices(adapters.KV_DTYPES)  # type: ignore[attr-defined]

    def clean_engine_version(self) -> str:
        value = (self.cleaned_data.get("engine_version") or "").strip()
        if value and not _VERSION.match(value):
            raise forms.ValidationError("expected a vLLM version such as 0.10.1")
        return value

    def clean_file(self) -> Any:
        """The file parses as JSON at most 20 deep, with integers Python can
        read (the shared input layer); the view reads it again from the start."""
        upload = self.cleaned_data["file"]
        if upload.size > adapters.MAX_CALIBRATION_BYTES:
            raise forms.ValidationError(
                f"file={shown(upload.name)}: {upload.size:,} bytes, larger than "
                f"{adapters.MAX_CALIBRATION_BYTES:,}"
            )
        content = upload.read()
        upload.seek(0)
        try:
            json_in(content, field=f"file {upload.name[:80]!r}")
        except InvalidInput as exc:
            if exc.reason.startswith(("is not JSON", "is not UTF-8")):
                return upload  # the import names the line (services.calibration_import)
            raise forms.ValidationError(str(exc)) from None
        return upload
