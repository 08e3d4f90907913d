"""Bills pages: thin views over costs.selectors and costs.services."""

from __future__ import annotations

import csv
import uuid
from pathlib import Path

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.text import get_valid_filename
from django.views.decorators.http import require_http_methods

from costapp.access import requires
from costapp.costs import selectors, services
from costapp.costs.forms import BackfillForm, FocusImportForm, WindowForm
from costapp.models import IngestRun

EXPORT_COLUMNS = [
    "date",
    "account_id",
    "currency",
    "basis",
    "target",
    "pool",
    "allocation",
    "amount",
]


def _window(request: HttpRequest) -> tuple[WindowForm, dict]:
    form = WindowForm(request.GET or None)
    if request.GET and form.is_valid():
        return form, form.cleaned_data
    empty = WindowForm({})
    empty.is_valid()
    return form, empty.cleaned_data


@requires("costapp.view_bills")
def bills(request: HttpRequest) -> HttpResponse:
    form, w = _window(request)
    days = selectors.bill_days(w["start"], w["end"], w["basis"])
    return render(
        request,
        "costs/bills.html",
        {
            "form": form,
            "window": w,
            "days": days,
            "estimated_days": sorted({d.day for d in days if d.estimated}),
            "totals": selectors.bill_total(w["start"], w["end"], w["basis"]),
            "runs": selectors.recent_runs(),
            "basis_label": selectors.BASES[w["basis"]],
        },
    )


@requires("costapp.view_bills")
def reconciliation(request: HttpRequest) -> HttpResponse:
    form, w = _window(request)
    return render(
        request,
        "costs/reconciliation.html",
        {
            "form": form,
            "window": w,
            "rows": selectors.reconciliation_rows(w["start"], w["end"], w["basis"]),
            "basis_label": selectors.BASES[w["basis"]],
        },
    )


class _Echo:
    def write(self, value: str) -> str:
        return value


@requires("costapp.export_bills")
def export_csv(request: HttpRequest) -> HttpResponseBase:
    form, w = _window(request)
    if request.GET and not form.is_valid():
        return HttpResponse(
            "; ".join(str(e) for errs in form.errors.values() for e in errs),
            status=400,
            content_type="text/plain",
        )
    rows = selectors.allocation_export_rows(w["start"], w["end"], w["basis"])
    writer = csv.writer(_Echo())
    # Decimal strings at stored precision: a spreadsheet sum reconciles exactly.
    lines = [writer.writerow(EXPORT_COLUMNS)] + [
        writer.writerow(
            [
                r.day.isoformat(),
                r.account_id,
                r.currency,
                w["basis"],
                r.target,
                r.pool,
                r.how,
                format(r.amount, "f"),
            ]
        )
        for r in rows
    ]
    response = StreamingHttpResponse(lines, content_type="text/csv")
    response["Content-Disposition"] = (
        f'attachment; filename="costapp-bill-{w["basis"]}-{w["start"]}-{w["end"]}.csv"'
    )
    return response


@requires("costapp.run_backfill", write="costapp.run_backfill")
@require_http_methods(["GET", "POST"])
def backfill(request: HttpRequest) -> HttpResponse:
    form = BackfillForm(request.POST or None)
    plan = None
    error = ""
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        args = {
            "account_ids": data["accounts"],
            "start": data["start"],
            "end": data["end"],
            "granularity": data["granularity"],
            "tag_key": data["tag_key"].strip(),
        }
        try:
            plan = services.bills_backfill_plan(**args)
            if request.POST.get("action") == "start" and (
                not plan.over_budget or data["confirm"]
            ):
                runs = services.bills_backfill_start(
                    **args, confirmed=bool(data["confirm"])
                )
                messages.success(
                    request,
                    f"backfill queued: {len(runs)} run(s), {plan.requests} requests "
                    "planned",
                )
                return redirect("costs:run", run_id=runs[0].pk)
        except services.BillsError as exc:
            error = str(exc)
    return render(
        request,
        "costs/backfill.html",
        {
            "form": form,
            "plan": plan,
            "error": error,
            "budget": settings.COST_EXPLORER_BUDGET_USD,
        },
    )


@requires("costapp.view_ingestrun")
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(IngestRun, pk=run_id, source__in=["cost_explorer", "focus"])
    return render(
        request,
        "costs/run.html",
        {"run": run, "progress": selectors.run_progress(run)},
    )


@requires("costapp.import_focus", write="costapp.import_focus")
@require_http_methods(["GET", "POST"])
def focus_import(request: HttpRequest) -> HttpResponse:
    form = FocusImportForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data.get("file")
        if upload:
            folder = Path(settings.VAR_DIR) / "uploads"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{uuid.uuid4().hex}-{get_valid_filename(upload.name)}"
            with path.open("wb") as out:
                for chunk in upload.chunks():
                    out.write(chunk)
            uri = str(path)
        else:
            uri = form.cleaned_data["uri"].strip()
        run = services.focus_import_start(uri=uri)
        return redirect("costs:run", run_id=run.pk)
    return render(request, "costs/focus_import.html", {"form": form})
