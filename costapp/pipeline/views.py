"""The pipeline's page: what follows new data, step by step, and "Evaluate
now". Tech leads and admins read it; evaluating needs the right to edit alert
rules (it may page)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from costapp.access import requires
from costapp.pipeline.change import Change
from costapp.pipeline.selectors import last_refreshes, pipeline_status
from costapp.pipeline.services import pipeline_request
from costapp.pipeline.tasks import alerts_evaluate_queue
from costapp.schedule import page_bound_s

# Where "Evaluate now" returns to: a fixed set, never a URL from the form.
BACK = {"alerts": "alerts:rules", "pipeline": "pipeline:status"}


@requires("costapp.view_ingestrun", write="costapp.change_alertrule")
def status(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        ran = alerts_evaluate_queue(pipeline_request(steps=["alerts"], change=Change()))
        messages.success(
            request,
            "evaluated every rule now"
            if ran
            else "evaluation queued for the alerts worker; the log shows what it sends",
        )
        return redirect(BACK.get(request.POST.get("back", ""), "pipeline:status"))
    now = timezone.now()
    return render(
        request,
        "pipeline/status.html",
        {
            "steps": pipeline_status(now=now),
            "refreshes": sorted(last_refreshes().items()),
            "page_bound_s": page_bound_s(),
            "now": now,
            "can_evaluate": request.user.has_perm("costapp.change_alertrule"),
        },
    )
