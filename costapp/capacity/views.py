"""Capacity what-if pages: thin views over whatif (numbers), tables (text),
services and charts."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from analytics.capacity.backtest import LARGE_ERROR
from analytics.errors import InvalidInput
from costapp.access import requires
from costapp.capacity import backtest_tables, charts, selectors, services, tables
from costapp.capacity.forms import (
    CalibrationUploadForm,
    MigCompareForm,
    SaveScenarioForm,
    SearchForm,
    field_errors,
)
from costapp.capacity.mig_layouts import mig_comparison
from costapp.capacity.selectors import Price
from costapp.capacity.whatif import (
    Simulation,
    capacity_search,
    simulate_column,
    whatif_compute,
    whatif_page,
)
from costapp.formatting import MISSING, money
from costapp.models import Calibration, Deployment
from costapp.models import Scenario as SavedScenario

# Rows of the input grid, in the order a tech lead thinks about them.
PARAMETERS = (
    "kv_dtype", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
    "gpu_memory_utilization", "block_size", "enforce_eager", "tp", "weight_dtype",
    "engine_version", "gpu", "mig_profile", "target_requests_per_s", "prompt_tokens",
    "output_tokens", "itl_sla_ms", "ttft_sla_ms", "sla_percentile",
)  # fmt: skip


@requires("costapp.run_whatif")
def index(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "capacity/index.html",
        {
            "deployments": Deployment.objects.all(),
        },
    )


@requires("costapp.run_whatif")
def whatif(request: HttpRequest, deployment: str) -> HttpResponse:
    dep = get_object_or_404(Deployment, name=deployment)
    page = whatif_page(dep, request.GET)
    computed = page.computed
    state, result = computed.state, computed.whatif
    curves, bars = page.curves, page.bars
    simulation: Simulation | str | None = None
    wanted = request.GET.get("simulate")
    if wanted:
        chosen = [c for c in result.columns if c.key == wanted]
        simulation = (
            simulate_column(chosen[0], page.calibrations)
            if chosen
            else str(InvalidInput("simulate", wanted, "no such column on this page"))
        )
    rows = [
        (
            name,
            computed.forms[0][2][name].label,
            state.settings.get(name),
            [form[name] for _, _, form in computed.forms],
        )
        for name in PARAMETERS
    ]
    query = request.GET.copy()
    query.pop("simulate", None)
    found = page.backtest
    backtest = found.backtest if found else None
    return render(
        request,
        "capacity/whatif.html",
        {
            "price_text": money(
                state.price.per_gpu_hour, state.price.currency, places=4
            )
            if state.price
            else None,
            "backtest": backtest,
            "backtest_found": found,
            "backtest_rows": backtest_tables.backtest_rows(
                found,
                observed_blocks=state.observed_blocks,
                predicted_blocks=result.modelled_blocks,
                peak_hour=state.traffic.hour if state.traffic else None,
                large_error=LARGE_ERROR,
            )
            if found
            else [],
            "backtest_notes": backtest_tables.backtest_notes(found) if found else [],
            "backtest_chart": charts.backtest_itl(backtest) if backtest else None,
            "large_error": LARGE_ERROR,
            "rejected": list(
                zip(
                    result.columns,
                    tables.rejected_cells(result, page.rejected),
                    strict=True,
                )
            ),
            "can_fit": request.user.has_perm("costapp.add_calibration"),
            "deployment": dep,
            "state": state,
            "whatif": tables.whatif_table(result),
            "whatif_result": result,
            "sizing": tables.replica_sizing(result),
            "binding": [(c, tables.binding_text(c.result)) for c in result.columns],
            "prices": tables.price_cells(result),
            "rows": rows,
            "errors": computed.errors,
            "columns": result.columns,
            "curves": curves,
            "throughput_chart": charts.throughput_latency(curves) if curves else None,
            "memory_chart": charts.memory_use(bars) if bars else None,
            "simulation": simulation if not isinstance(simulation, str) else None,
            "simulation_rows": tables.simulation_rows(simulation.result)
            if isinstance(simulation, Simulation)
            else [],
            "simulation_error": simulation if isinstance(simulation, str) else None,
            "query": query.urlencode(),
            "save_form": SaveScenarioForm(initial={"query": query.urlencode()}),
        },
    )


@requires("costapp.run_whatif", write="costapp.add_scenario")
def scenario_save(request: HttpRequest, deployment: str) -> HttpResponse:
    dep = get_object_or_404(Deployment, name=deployment)
    back = reverse("capacity:whatif", args=[dep.name])
    if request.method != "POST":
        return redirect(back)
    form = SaveScenarioForm(request.POST)
    if not form.is_valid():
        for error in field_errors(form):
            messages.error(request, error)
        return redirect(back)
    query = form.cleaned_data["query"]
    computed = whatif_compute(dep, QueryDict(query))
    if computed.errors:
        for error in computed.errors:
            messages.error(request, error)
        return redirect(f"{back}?{query}")
    saved = services.scenario_save(
        name=form.cleaned_data["name"],
        deployment=dep,
        whatif=computed.whatif,
        query=query,
        user=request.user,
    )
    messages.success(request, f"Saved “{saved.name}”.")
    return redirect("capacity:scenario_share", share_token=saved.share_token)


@requires("costapp.run_whatif", write="costapp.add_calibration")
def calibration_fit(request: HttpRequest, deployment: str) -> HttpResponse:
    """Fit a calibration from the deployment's telemetry (the back-test offers
    it when its error is large or its p95 tail disagrees) and go back to the
    what-if page."""
    dep = get_object_or_404(Deployment, name=deployment)
    back = reverse("capacity:whatif", args=[dep.name]) + "#backtest"
    if request.method != "POST":
        return redirect(back)
    try:
        row = services.calibration_fit_telemetry(deployment=dep)
    except InvalidInput as exc:
        messages.error(request, f"Fit from telemetry refused: {exc}")
    else:
        error = MISSING if row.fit_error is None else f"{row.fit_error:.1%} MAPE"
        messages.success(
            request,
            f"Fitted {row} from telemetry: {services.telemetry_fit_parts(row)} "
            f"(fit error {error} on its hours).",
        )
    return redirect(back)


@requires("costapp.view_scenario")
def scenarios(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "capacity/scenarios.html",
        {
            "scenarios": selectors.saved_scenarios(),
        },
    )


@requires("costapp.view_scenario")
def scenario_share(request: HttpRequest, share_token: str) -> HttpResponse:
    saved = get_object_or_404(SavedScenario, share_token=share_token)
    columns = saved.result.get("columns", [])
    metrics = saved.result.get("metrics", [])
    rows = [
        (
            label,
            unit,
            [
                (
                    col["cells"][i] if i < len(col.get("cells", [])) else MISSING,
                    col["deltas"][i] if i < len(col.get("deltas", [])) else "",
                )
                for col in columns
            ],
        )
        for i, (_, label, unit) in enumerate(metrics)
    ]
    return render(
        request,
        "capacity/scenario.html",
        {
            "saved": saved,
            "columns": columns,
            "rows": rows,
            "open_url": (
                reverse("capacity:whatif", args=[saved.deployment.name])
                + "?"
                + saved.inputs.get("query", "")
            )
            if saved.deployment
            else None,
        },
    )


@requires("costapp.view_scenario")
def scenario_csv(request: HttpRequest, share_token: str) -> HttpResponse:
    saved = get_object_or_404(SavedScenario, share_token=share_token)
    response = HttpResponse(
        services.scenario_csv_export(saved), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = (
        f'attachment; filename="scenario-{saved.share_token}.csv"'
    )
    return response


@requires("costapp.run_whatif")
def mig(request: HttpRequest) -> HttpResponse:
    form = MigCompareForm(request.GET or None)
    rows: list[tables.MigRow] = []
    problems: list[str] = []
    errors: list[str] = []
    price: Price | None = None
    shared_rows: list[tables.MigSharedRow] = []
    if form.is_bound:
        if form.is_valid():
            comparison = mig_comparison(
                form.cleaned_data["gpu"],
                form.cleaned_data.get("layout_list", []),
                list(form.cleaned_data["deployments"] or []),
                shared=form.cleaned_data.get("shared_list", []),
            )
            rows, problems = tables.mig_rows(comparison), list(comparison.problems)
            shared_rows = tables.mig_shared_rows(comparison)
            price = comparison.price
        else:
            errors = field_errors(form)
    return render(
        request,
        "capacity/mig.html",
        {
            "form": form,
            "price": price,
            "price_text": money(price.per_gpu_hour, price.currency, places=4)
            if price
            else None,
            "rows": rows,
            "shared_rows": shared_rows,
            "problems": problems,
            "errors": errors,
        },
    )


@requires("costapp.run_whatif")
def search(request: HttpRequest) -> HttpResponse:
    form = SearchForm(request.GET or None)
    context: dict[str, Any] = {"form": form, "errors": [], "outcome": None}
    if form.is_bound:
        if not form.is_valid():
            context["errors"] = field_errors(form)
        else:
            data = form.cleaned_data
            constraints = (
                {"max_gpus": data["max_gpus"]} if data.get("max_gpus") else None
            )
            outcome = capacity_search(
                data["deployment"],
                data["space"],
                objective=data["objective"],
                constraints=constraints,
            )
            keys = list(data["space"])
            context["outcome"] = outcome
            context["ranked"] = tables.search_rows(
                outcome.ranked, keys, 50, outcome.currency
            )
            context["infeasible"] = tables.search_rows(
                outcome.infeasible, keys, 50, outcome.currency
            )
            context["infeasible_count"] = len(outcome.infeasible)
            context["ranked_count"] = len(outcome.ranked)
            if len(outcome.pareto):
                context["pareto_chart"] = charts.pareto(
                    *tables.pareto_series(outcome, keys)
                )
    return render(request, "capacity/search.html", context)


@requires("costapp.view_calibration", write="costapp.add_calibration")
def calibrations(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = CalibrationUploadForm(request.POST, request.FILES)
        if form.is_valid():
            upload = form.cleaned_data["file"]
            target = {k: v for k, v in form.cleaned_data.items() if k != "file"}
            try:
                row = services.calibration_import(
                    content=upload.read(), filename=upload.name, target=target
                )
            except InvalidInput as exc:
                form.add_error(None, f"{upload.name}: {exc}")
            else:
                messages.success(request, f"Imported {row}.")
                return redirect("capacity:calibrations")
    else:
        form = CalibrationUploadForm()
    return render(
        request,
        "capacity/calibrations.html",
        {
            "form": form,
            "errors": field_errors(form) if form.is_bound else [],
            "calibrations": Calibration.objects.all()[:500],
        },
    )
