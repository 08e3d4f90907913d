"""What follows new data, as stored: one row per pipeline step.

The steps themselves are named in ``costapp.pipeline.steps``. A row is the
step's durable queue and its lock, so that figures are found and fixed from
the database when a worker or the broker dies (compose's Redis keeps nothing
across a restart):

- ``requested`` and ``consumed`` are the step's data versions: every request
  raises the first, every success sets the second to the version it started
  from. A step is behind while ``requested > consumed``.
- ``pending`` is the merged change still to do (``costapp.pipeline.change``),
  ``inflight`` the one a lease holder is doing. Requests arriving while a step
  runs merge into ``pending``: one follow-up, whatever their number.
- ``lease_owner`` and ``lease_until`` are the lock. The holder renews the
  lease while it works; a lease that ran out is a dead holder, whose
  ``inflight`` work goes back to the next claimer.

Written by workers only and shown on no cached page (``costapp.pagecache``
leaves it unwatched: a heartbeat must not empty the page cache).
"""

from __future__ import annotations

from django.db import models


class PipelineStep(models.Model):
    name = models.CharField(max_length=32, unique=True)
    requested = models.BigIntegerField(default=0)
    consumed = models.BigIntegerField(default=0)
    pending = models.JSONField(null=True, blank=True)
    # When the oldest request merged into ``pending`` (or ``inflight``) arrived:
    # the data-to-figure lag is measured from it.
    pending_since = models.DateTimeField(null=True, blank=True)
    inflight = models.JSONField(null=True, blank=True)
    inflight_since = models.DateTimeField(null=True, blank=True)
    inflight_version = models.BigIntegerField(default=0)
    lease_owner = models.CharField(max_length=120, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    # When a task for it was last sent to the broker (the reaper waits a
    # grace period after it before sending another).
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_duration_s = models.FloatField(null=True, blank=True)
    # From the arrival of the oldest data it consumed to its success.
    last_lag_s = models.FloatField(null=True, blank=True)
    runs = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} {self.consumed}/{self.requested}"

    @property
    def behind(self) -> bool:
        return self.requested > self.consumed
