"""Liveness and readiness, open without login (load balancers, compose)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from costapp.celery import app

logger = logging.getLogger(__name__)


@login_not_required
@require_safe
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


def _broker_reachable() -> str | None:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except Exception as exc:  # noqa: BLE001 - any broker failure means not ready
        # The answer is public: the broker's address and the error go to the
        # log, not to whoever asks.
        logger.warning("readyz: broker unreachable: %s", exc)
        return "broker unreachable"
    return None


@login_not_required
@require_safe
@never_cache
def readyz(request: HttpRequest) -> JsonResponse:
    problems: list[str] = []
    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if pending:
            problems.append(f"{len(pending)} migration(s) not applied")
    except DatabaseError as exc:
        logger.warning("readyz: database unreachable: %s", exc)
        problems.append("database unreachable")
    if settings.CELERY_BROKER_URL:
        broker_problem = _broker_reachable()
        if broker_problem:
            problems.append(broker_problem)
    if problems:
        return JsonResponse({"status": "unavailable", "problems": problems}, status=503)
    return JsonResponse({"status": "ok"})
