"""gunicorn settings for the web service (docker-compose.yml and the tests).

The bind address comes from GUNICORN_BIND so the tests run the very command the
compose file runs, on a loopback port of their own.

Workers are threaded (``gthread``): their ``timeout`` watches that the worker
process is alive, not how long one request takes, so a streamed finance export
of a long window runs for as long as it keeps sending, where a sync worker is
killed ``GUNICORN_TIMEOUT`` seconds into it (tests/foundation/test_gunicorn.py
shows both). A slow download also holds one thread, not the whole worker.
Each thread has its own database connection: workers x threads per container.
"""

from __future__ import annotations

import os

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", "3"))
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
timeout = int(os.environ.get("GUNICORN_TIMEOUT", "60"))
accesslog = "-"
errorlog = "-"
