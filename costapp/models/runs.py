from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone


class IngestRun(models.Model):
    """One run of one source over one window: what it did and how it ended."""

    QUEUED, RUNNING, SUCCEEDED, PARTIAL, FAILED = (
        "queued",
        "running",
        "succeeded",
        "partial",
        "failed",
    )
    STATUSES = [(s, s) for s in (QUEUED, RUNNING, SUCCEEDED, PARTIAL, FAILED)]

    source = models.CharField(max_length=32)
    target = models.CharField(max_length=200, blank=True)  # account, deployment, file
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()  # exclusive
    status = models.CharField(max_length=16, choices=STATUSES, default=QUEUED)
    steps_total = models.PositiveIntegerField(default=0)
    steps_done = models.PositiveIntegerField(default=0)
    rows_written = models.PositiveIntegerField(default=0)
    rows_deleted = models.PositiveIntegerField(default=0)
    api_requests = models.PositiveIntegerField(default=0)
    # Cost Explorer charges $0.01 per request and per page.
    api_cost_usd = models.DecimalField(max_digits=12, decimal_places=2, default=0)
    params = models.JSONField(default=dict, blank=True)
    errors = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    # What the run could not measure though it did not fail (e.g. "GPU-hours
    # unknown"): shown beside the status, kept apart from the error.
    warnings = models.JSONField(default=list, blank=True)
    celery_task_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["source", "status"])]

    def __str__(self) -> str:
        return f"{self.source} {self.target} {self.window_start:%Y-%m-%d}..{self.window_end:%Y-%m-%d} {self.status}"

    @property
    def progress(self) -> float:
        return self.steps_done / self.steps_total if self.steps_total else 0.0

    @property
    def finished(self) -> bool:
        return self.status in {self.SUCCEEDED, self.PARTIAL, self.FAILED}

    # The one place a run's status is written. Each is one UPDATE of the
    # fields it names, so counters the ingest adds with F() in the meantime
    # are never overwritten by this instance's stale copy.

    def start(self, **fields: Any) -> None:
        """Running from now (``fields``: e.g. ``steps_total``)."""
        self._set(
            status=self.RUNNING,
            started_at=timezone.now(),
            finished_at=None,
            error="",
            **fields,
        )

    def finish(self, status: str, *, error: str = "", **fields: Any) -> None:
        """Succeeded, partial or failed, with why (cut to what the page shows)."""
        if status not in {self.SUCCEEDED, self.PARTIAL, self.FAILED}:
            raise ValueError(f"status={status!r}: not a finished status")
        self._set(
            status=status, error=error[:5000], finished_at=timezone.now(), **fields
        )

    def fail(self, error: str) -> None:
        self.finish(self.FAILED, error=error)

    def _set(self, **fields: Any) -> None:
        type(self).objects.filter(pk=self.pk).update(**fields)
        self.refresh_from_db()
