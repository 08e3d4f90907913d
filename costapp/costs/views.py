"""Bills pages: thin views over costs.selectors and costs.services."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import date, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from analytics.errors import shown
from costapp import pagecache
from costapp.access import requires
from costapp.costs import allocations, selectors, services
from costapp.costs.breakdown import (
    DIMENSIONS,
    bill_lines_read,
    breakdown_read,
    day_chart,
    day_lines_read,
)
from costapp.costs.commitments import NONE_TEXT, commitments_read
from costapp.costs.export.build import Export, ExportSpec, file_stem
from costapp.costs.export.files import csv_rows, summary_csv, zip_stream
from costapp.costs.export.reads import coverage_read, in_one_snapshot, one_snapshot
from costapp.costs.export.rows import QUANTUM
from costapp.costs.forms import (
    PRESETS,
    BackfillForm,
    BillLinesForm,
    ExportForm,
    FocusImportForm,
    RangeForm,
)
from costapp.costs.tasks import focus_import_task
from costapp.costs.uploads import content_refusal, upload_refused
from costapp.csv_export import csv_lines
from costapp.filters import Filters, filters_read
from costapp.formatting import money
from costapp.models import IngestRun
from costapp.tasks import ingest_runs_queue

RECONCILIATION_COLUMNS = [
    "date",
    "deployment",
    "basis",
    "status",
    "gpu_hours",
    "rate_per_gpu_hour",
    "provisional_cost",
    "bill_amount",
    "difference",
]


def _window(request: HttpRequest) -> Filters:
    """The page's window, cost basis, team and deployments from the URL
    (``costapp.filters``). A refused filter names the field and the value;
    the page then shows the default window, says so, and its form shows that
    window rather than the refused values."""
    return filters_read(request.GET, form=RangeForm)


def _window_context(f: Filters) -> dict[str, Any]:
    """What every costs page says about the window and scope it shows."""
    basis = f.page.get("basis") or selectors.DEFAULT_BASIS
    w = {"start": f.start, "end": f.end, "preset": f.preset, "basis": basis}
    return {
        "filters": f,
        "window": w,
        "last_day": f.last_day,
        "presets": PRESETS,
        "preset_label": f.preset_label,
        "basis_label": selectors.BASES[basis],
        "window_errors": f.errors,
        "scope_query": urlencode(f.params(window=False)),
    }


def _export_links(w: dict[str, Any]) -> list[tuple[str, str]]:
    base = {"start": w["start"], "end": w["end"], "basis": w["basis"]}
    # Exports cover the whole bill of the window (they reconcile to it), so
    # they carry the window and basis but never a team or deployment filter.
    out = []
    for fmt, grain, by in (
        ("csv", "day", "deployment"),
        ("csv", "month", "deployment"),
        ("csv", "month", "team"),
        ("parquet", "day", "deployment"),
    ):
        query = urlencode({**base, "format": fmt, "grain": grain, "by": by})
        label = f"{fmt.upper() if fmt == 'csv' else 'Parquet'} by {grain} and {by}"
        out.append((label, f"{reverse('costs:export_zip')}?{query}"))
    return out


def _page(
    request: HttpRequest, page: str, context: Callable[[Filters], dict[str, Any]]
) -> HttpResponse:
    """A costs page (``costs/<page>.html`` around ``costs/_<page>_body.html``)
    whose body comes from the page cache (``costapp.pagecache``) for this
    data, query string, day and rights: ``context`` is read only on a miss.
    The layout around the body is rendered per request."""
    f = _window(request)
    body = pagecache.body_render(
        request,
        f"costs/_{page}_body.html",
        page=page,
        key=(f.start, f.end, f.preset, sorted(f.scope.items())),
        context=lambda: context(f),
    )
    return render(request, f"costs/{page}.html", {"body": body})


@requires("costapp.view_bills")
def bills(request: HttpRequest) -> HttpResponse:
    return _page(request, "bills", _bills_context)


def _bills_context(f: Filters) -> dict[str, Any]:
    ctx = _window_context(f)
    w = ctx["window"]
    days = allocations.bill_days_read(w["start"], w["end"], w["basis"], **f.scope)
    totals: dict[str, Decimal] = {}
    selected: dict[str, Decimal] = {}
    for d in days:
        totals[d.currency] = totals.get(d.currency, Decimal(0)) + d.total
        if d.selected is not None:
            selected[d.currency] = selected.get(d.currency, Decimal(0)) + d.selected
    return {
        **ctx,
        "days": days,
        "estimated_days": sorted({d.day for d in days if d.estimated}),
        "review_lines": sum(d.review_lines for d in days),
        "totals": totals,
        "totals_text": [(c, money(v, c)) for c, v in sorted(totals.items())],
        "selected_text": [(c, money(v, c)) for c, v in sorted(selected.items())],
        "runs": selectors.recent_runs_read(),
        "exports": _export_links(w),
        **_commitments_context(w["start"], w["end"]),
    }


def _commitments_context(start: date, end: date) -> dict[str, Any]:
    found = commitments_read(start, end)
    tables = []
    if found is not None:
        tables = [
            ("By month (whole months)", found.months),
            ("By UTC day of the window", found.days),
        ]
    return {
        "commitments": found,
        "commitment_tables": tables,
        "no_commitments_text": NONE_TEXT,
    }


@requires("costapp.view_bills")
def reconciliation(request: HttpRequest) -> HttpResponse:
    return _page(request, "reconciliation", _reconciliation_context)


def _reconciliation_context(f: Filters) -> dict[str, Any]:
    ctx = _window_context(f)
    w = ctx["window"]
    rows = allocations.reconciliation_rows_read(
        w["start"], w["end"], w["basis"], **f.scope
    )
    days = allocations.reconciliation_days_read(w["start"], w["end"], w["basis"])
    return {
        **ctx,
        "rows": rows,
        "totals": allocations.reconciliation_totals(rows),
        "days": days,
        "days_total": allocations.ReconciliationDay(
            day=w["start"],
            deployments=sum((d.deployments for d in days), Decimal(0)),
            idle=sum((d.idle for d in days), Decimal(0)),
            unallocated=sum((d.unallocated for d in days), Decimal(0)),
        ),
        "narrowed": f.deployments is not None,
    }


def _export_spec(request: HttpRequest) -> ExportSpec | HttpResponse:
    form = ExportForm(request.GET)
    # An export reconciles to the whole bill of its window: a team or
    # deployment filter is refused, never silently dropped.
    narrowed = [
        f"{name}={shown(request.GET.get(name))}: an export covers the whole bill "
        "of its window (split it with by=team or by=deployment)"
        for name in ("team", "deployment")
        if request.GET.get(name)
    ]
    if narrowed or not form.is_valid():
        return HttpResponse(
            "; ".join(narrowed or form.messages()),
            status=400,
            content_type="text/plain",
        )
    w = form.cleaned_data
    return ExportSpec(
        start=w["start"],
        end=w["end"],
        grain=w["grain"],
        by=w["by"],
        basis=w["basis"],
        format=w["format"],
    )


def _export_streamed(
    request: HttpRequest,
    body: Callable[[Export], Iterator[Any]],
    extension: str,
    content_type: str,
) -> HttpResponseBase:
    """An export streamed from one read-only snapshot: its coverage, rows
    and summary see the same bills, however long the download takes
    (``export.reads.in_one_snapshot``). The response's file name comes from
    a coverage read just before the stream opens its snapshot; where a bill
    lands in between, the names inside the ZIP and its summary are the ones
    that match the data."""
    spec = _export_spec(request)
    if isinstance(spec, HttpResponse):
        return spec
    stem = file_stem(spec, coverage_read(spec.start, spec.end))
    if extension == "zip":  # a CSV and a Parquet ZIP of one window differ
        stem = f"{stem}-{spec.format}"
    response = StreamingHttpResponse(
        in_one_snapshot(lambda: body(Export(spec))), content_type=content_type
    )
    return _attachment(response, f"{stem}.{extension}")


def _q(value: Decimal | None) -> Decimal | None:
    return None if value is None else value.quantize(QUANTUM)


def _attachment(response: HttpResponseBase, name: str) -> HttpResponseBase:
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@requires("costapp.view_bills")
def breakdown(request: HttpRequest) -> HttpResponse:
    return _page(request, "breakdown", _breakdown_context)


def _breakdown_context(f: Filters) -> dict[str, Any]:
    ctx = _window_context(f)
    w = ctx["window"]
    data = breakdown_read(start=w["start"], end=w["end"], basis=w["basis"], **f.scope)
    return {
        **ctx,
        "exports": _export_links(w),
        "b": data,
        "day_figure": day_chart(data),
        "dimensions": [
            (label, data.dimensions[key]) for key, label in DIMENSIONS.items()
        ],
    }


@requires("costapp.view_bills")
def bill_lines(request: HttpRequest) -> HttpResponse:
    form = BillLinesForm(request.GET)
    if not form.is_valid():
        return render(
            request,
            "costs/bill_lines.html",
            {"form": form, "errors": form.messages(), "rows": [], "count": 0},
        )
    d = form.cleaned_data
    basis = selectors.basis_or_default(d.get("basis"))
    rows, count = bill_lines_read(day=d["day"], basis=basis, account=d["account"])
    return render(
        request,
        "costs/bill_lines.html",
        {
            "form": form,
            "day": d["day"],
            "rows": rows,
            "count": count,
            "basis": basis,
            "basis_label": selectors.BASES[basis],
        },
    )


LINE_COLUMNS = [
    "date",
    "account_id",
    "currency",
    "basis",
    "service",
    "usage_type",
    "record_type",
    "commitment",
    "resource_id",
    "tag_key",
    "tag_value",
    "usage_quantity",
    "usage_unit",
    "amount",
    "status",
]


@requires("costapp.export_bills")
def bill_lines_csv(request: HttpRequest) -> HttpResponseBase:
    """One day's bill lines as stored, tags included, as CSV. Without a
    ``day``: the latest day that has a bill."""
    query = request.GET.copy()
    if "day" not in query:
        query["day"] = selectors.latest_bill_day_read().isoformat()
    form = BillLinesForm(query)
    if not form.is_valid():
        return HttpResponse(
            "; ".join(form.messages()), status=400, content_type="text/plain"
        )
    d = form.cleaned_data
    basis = selectors.basis_or_default(d.get("basis"))
    lines = csv_lines(
        LINE_COLUMNS,
        (
            [
                d["day"],
                x.account_id,
                x.currency,
                basis,
                x.service,
                x.usage_type,
                x.record_type,
                x.commitment,
                x.resource_id,
                x.tag_key,
                x.tag_value,
                x.usage_quantity,
                x.usage_unit,
                selectors.line_amount(x, basis).quantize(QUANTUM),
                "estimated" if x.estimated else "final",
            ]
            for x in day_lines_read(day=d["day"], account=d["account"])
        ),
    )
    response = StreamingHttpResponse(lines, content_type="text/csv")
    return _attachment(response, f"costapp-bill-lines-{d['day']}-{basis}.csv")


@requires("costapp.export_bills")
def export_csv(request: HttpRequest) -> HttpResponseBase:
    """The data CSV alone (its summary: ``export_summary``)."""
    return _export_streamed(request, csv_rows, "csv", "text/csv")


@requires("costapp.export_bills")
def export_zip(request: HttpRequest) -> HttpResponseBase:
    """The data file (CSV or Parquet) and its summary, one streamed ZIP."""
    return _export_streamed(request, zip_stream, "zip", "application/zip")


@requires("costapp.export_bills")
def export_summary(request: HttpRequest) -> HttpResponseBase:
    spec = _export_spec(request)
    if isinstance(spec, HttpResponse):
        return spec
    with one_snapshot():
        export = Export(spec)
        for _ in export.records():  # the summary reconciles what the rows hold
            pass
        body = "".join(summary_csv(export))
    response = HttpResponse(body, content_type="text/csv")
    return _attachment(response, f"{export.stem}-summary.csv")


@requires("costapp.export_bills")
def reconciliation_export(request: HttpRequest) -> HttpResponseBase:
    f = _window(request)
    if f.errors:
        return HttpResponse("; ".join(f.errors), status=400, content_type="text/plain")
    w = _window_context(f)["window"]
    rows = allocations.reconciliation_rows_read(
        w["start"], w["end"], w["basis"], **f.scope
    )
    lines = csv_lines(
        RECONCILIATION_COLUMNS,
        (
            [
                r.day,
                r.deployment,
                w["basis"],
                "provisional" if r.provisional_only else "billed",
                r.gpu_hours,
                *(_q(v) for v in (r.rate_per_gpu_hour, r.provisional)),
                *(_q(v) for v in (r.billed, r.difference)),
            ]
            for r in rows
        ),
    )
    last = w["end"] - timedelta(days=1)
    response = StreamingHttpResponse(lines, content_type="text/csv")
    return _attachment(
        response, f"costapp-reconciliation-{w['start']}-to-{last}-{w['basis']}.csv"
    )


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
            "tag_key": data["tag_key"],
        }
        try:
            plan = services.bills_backfill_plan(**args)
            if request.POST.get("action") == "start" and (
                not plan.over_budget or data["confirm"]
            ):
                runs = services.bills_backfill_create(
                    **args, confirmed=bool(data["confirm"])
                )
                ingest_runs_queue(runs)
                messages.success(
                    request,
                    f"backfill queued: {len(runs)} run(s), {plan.requests} requests "
                    "planned",
                )
                return redirect("costs:run", run_id=runs[0].pk)
        except services.BillsError as exc:
            error = str(exc)
    elif request.method == "POST":
        error = "; ".join(form.messages())
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


def _store_upload(upload: Any) -> Any:
    """Write the upload under the upload directory (a name of our own: the
    user's name stays in the run's parameters), stopping at the cap."""
    folder = services.upload_dir()
    folder.mkdir(parents=True, exist_ok=True)
    suffix = "".join(
        s for s in services.FOCUS_SUFFIXES if upload.name.lower().endswith(s)
    )[-8:]
    path = folder / f"{uuid.uuid4().hex}{suffix}"
    written = 0
    limit = int(settings.COSTAPP_UPLOAD_MAX_BYTES)
    try:
        with path.open("wb") as out:
            for chunk in upload.chunks():
                if written == 0 and (why := content_refusal(upload.name, chunk)):
                    raise services.BillsError(f"file={upload.name[:80]!r}: {why}")
                written += len(chunk)
                if written > limit:
                    raise services.BillsError(
                        f"file={upload.name[:80]!r}: larger than the upload limit "
                        f"of {limit:,} bytes (COSTAPP_UPLOAD_MAX_BYTES)"
                    )
                out.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


@requires("costapp.import_focus", write="costapp.import_focus")
@require_http_methods(["GET", "POST"])
def focus_import(request: HttpRequest) -> HttpResponse:
    # Reading POST and FILES runs the upload handlers, which may cut a file off.
    form = FocusImportForm(request.POST or None, request.FILES or None)
    refused = upload_refused(request) if request.method == "POST" else ""
    error = refused
    if request.method == "POST" and not refused and form.is_valid():
        upload = form.cleaned_data.get("file")
        path = None
        try:
            if upload:
                path = _store_upload(upload)
                run = services.focus_import_create(upload=path, name=upload.name)
            else:
                run = services.focus_import_create(uri=form.cleaned_data["uri"])
        except services.BillsError as exc:
            if path is not None:
                path.unlink(missing_ok=True)
            error = str(exc)
        else:
            focus_import_task.delay_on_commit(run.pk)
            return redirect("costs:run", run_id=run.pk)
    elif request.method == "POST" and not refused:
        error = "; ".join(form.messages())
    return render(request, "costs/focus_import.html", {"form": form, "error": error})
