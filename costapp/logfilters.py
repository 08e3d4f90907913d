"""Logging filters (configured in settings.LOGGING: no app imports here, as
logging is configured before the apps load)."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied


class OneLineDenials(logging.Filter):
    """A 403 from a missing permission is an expected answer, not an error:
    Django logs each with its traceback at WARNING (168 lines for 85 denials
    in a day's use). It is kept as one line naming the user, the request and
    the permission missing; other records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, PermissionDenied):
            return True
        request = getattr(record, "request", None)
        user = getattr(request, "user", None)
        who = getattr(user, "username", "") or "anonymous"
        missing = getattr(request, "missing_permission", "") or "a permission"
        method = getattr(request, "method", "")
        path = getattr(request, "path", "")
        record.msg = "Forbidden: %s %s by %r (missing %s)"
        record.args = (method, path, who, missing)
        record.exc_info = None
        record.exc_text = None
        return True
