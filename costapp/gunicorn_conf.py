"""gunicorn settings for the web service (docker-compose.yml and the tests).

The bind address comes from GUNICORN_BIND so the tests run the very command the
compose file runs, on a loopback port of their own.
"""

from __future__ import annotations

import os

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", "3"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "60"))
accesslog = "-"
errorlog = "-"
