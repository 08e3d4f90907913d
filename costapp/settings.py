"""costapp settings: one module, everything from the environment.

Every default works on a laptop with nothing installed: SQLite, tasks run
in-process, the demo fleet as the only source. The table of variables is in the
README; keep the two in step.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
import secrets
import warnings
import zoneinfo
from pathlib import Path

import plotly

from costapp.env import (
    EnvError,
    database_from_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_mapping,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("COSTAPP_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY", "")
# Keys that were ever published (an example file, a README) protect nothing.
_PUBLIC_KEYS = {"change-me-to-a-long-random-string-before-any-real-use"}
if env_bool("COSTAPP_REQUIRE_SECRET_KEY", False) and not DEBUG:
    if not SECRET_KEY:
        raise EnvError("SECRET_KEY is required when COSTAPP_REQUIRE_SECRET_KEY=true")
    if SECRET_KEY in _PUBLIC_KEYS or len(SECRET_KEY) < 50:
        raise EnvError(
            "SECRET_KEY: a published example or shorter than 50 characters; create "
            "one with python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"
        )
# Published (it is in this file): channel secrets encrypted under a key derived
# from it decrypt offline, so only alerts_secrets_rotate reads with it once a real
# key is set (costapp/alerts/secrets.py).
COSTAPP_DEVELOPMENT_SECRET_KEY = "costapp-insecure-development-key"  # noqa: S105


def _demo_secret_key(path: Path) -> str:
    """The demo's own key: random on its first run, then read back from its data
    directory (owner-only), so its database's secrets do not decrypt offline."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            os.chmod(path, 0o600)
            key = path.read_text().strip()
        else:
            key = secrets.token_urlsafe(50)
            with os.fdopen(fd, "w") as out:
                out.write(key + "\n")
    except OSError as exc:
        raise EnvError(f"the demo's secret key {path}: {exc}") from None
    if len(key) < 50:
        raise EnvError(f"the demo's secret key {path}: shorter than 50; delete it")
    return key


if not SECRET_KEY and env_bool("COSTAPP_DEMO", False):
    SECRET_KEY = _demo_secret_key(VAR_DIR / "demo_secret_key")
if not SECRET_KEY:
    # Development default; docker-compose.yml reads a real one from a file.
    SECRET_KEY = COSTAPP_DEVELOPMENT_SECRET_KEY
# Earlier keys, newest first (comma-separated, or a file of them): sessions and
# signed links made under them stay valid, and channel secrets encrypted under a
# key derived from them (COSTAPP_SECRET_KEYS unset then) still decrypt.
SECRET_KEY_FALLBACKS = [
    key for key in re.split(r"[,\s]+", env_str("SECRET_KEY_FALLBACKS", "")) if key
]
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")
SITE_URL = env_str("SITE_URL", "http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "axes",
    "csp",
    "rest_framework",
    "drf_spectacular",
    "django_filters",
    "costapp.apps.CostappConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Pages and exports gzipped for clients that ask (a deployment page is
    # 650-850 KiB of HTML and figure JSON). After WhiteNoise, which serves
    # static files precompressed; Django's GZipMiddleware pads each response
    # against BREACH (since 4.2), as CSRF tokens are in the pages.
    "django.middleware.gzip.GZipMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "costapp.access.PrivateCacheMiddleware",
    "costapp.access.AuditMiddleware",
    # Last, so that it sees the outcome of authentication (django-axes' rule).
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "costapp.urls"
WSGI_APPLICATION = "costapp.wsgi.application"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "landing"
LOGOUT_REDIRECT_URL = "login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "costapp.context_processors.display",
            ],
        },
    },
]

DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'costapp.sqlite3'}"),
        base_dir=BASE_DIR,
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"  # storage and bucketing are UTC; see DISPLAY_TIME_ZONE
DISPLAY_TIME_ZONE = env_str("DISPLAY_TIME_ZONE", "UTC")
try:
    zoneinfo.ZoneInfo(DISPLAY_TIME_ZONE)
except (zoneinfo.ZoneInfoNotFoundError, ValueError):
    raise EnvError(
        f"DISPLAY_TIME_ZONE={DISPLAY_TIME_ZONE!r}: not an IANA time zone"
    ) from None
LANGUAGE_CODE = "en-us"
USE_I18N = False

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
# plotly.js is served from the plotly package itself: nothing is fetched at run
# time and nothing large is copied into the repository.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("plotly", Path(plotly.__file__).resolve().parent / "package_data"),
]
# The demo and compose run collectstatic with COSTAPP_STATIC_COLLECTED=true:
# hashed names (cached forever) and gzip files beside them, so plotly.js goes
# out compressed (whitenoise only serves .gz that collectstatic wrote). Tests
# and a bare runserver read the source folders through the finders instead.
STATIC_COLLECTED = env_bool("COSTAPP_STATIC_COLLECTED", False)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if STATIC_COLLECTED
        else "whitenoise.storage.CompressedStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = not STATIC_COLLECTED
# ...so STATIC_ROOT may not exist yet; whitenoise's warning about it is noise.
warnings.filterwarnings("ignore", message=re.escape(f"No directory at: {STATIC_ROOT}"))

# Rendered page bodies (costapp/pagecache.py), kept until the data under them
# changes or PAGE_CACHE_SECONDS pass (0: off). PAGE_CACHE_URL (redis://...)
# shares them between the web workers; without it each process keeps its own.
PAGE_CACHE_SECONDS = env_int("PAGE_CACHE_SECONDS", 300, minimum=0)
PAGE_CACHE_URL = env_str("PAGE_CACHE_URL", "")
# After each refresh the worker renders again the bodies read most recently
# (costapp/pagewarm.py): at most this many, within this many seconds.
COSTAPP_PAGE_WARM_MAX = env_int("COSTAPP_PAGE_WARM_MAX", 100, minimum=0)
COSTAPP_PAGE_WARM_S = env_int("COSTAPP_PAGE_WARM_S", 60, minimum=1)
# The shared page cache but its LOCATION: whatever renders into it (a web
# worker, the live worker, bench/bench_pages.py) must build the same keys.
PAGE_CACHE_REDIS = {
    "BACKEND": "django.core.cache.backends.redis.RedisCache",
    "KEY_PREFIX": "costapp",
    "TIMEOUT": PAGE_CACHE_SECONDS,
}
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "pages": {**PAGE_CACHE_REDIS, "LOCATION": PAGE_CACHE_URL}
    if PAGE_CACHE_URL
    else {
        "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
        "LOCATION": "costapp-pages",
        "TIMEOUT": PAGE_CACHE_SECONDS,
        # A 90-day telemetry body is about 400 kB.
        "OPTIONS": {"MAX_ENTRIES": 100},
    },
}

# Celery: with no broker configured, tasks run in-process (the embedded demo).
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = env_str("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 1800, minimum=1)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 2100, minimum=1)
CELERY_TIMEZONE = "UTC"
# Routing lives here, never in call arguments: callers just delay_on_commit().
# Three queues, each with its own worker in docker-compose.yml: ingest
# (backfills, uploads; may run for half an hour), live (the refreshes and the
# steps after new data, so a backfill never delays a page) and alerts.
COSTAPP_INGEST_QUEUE = env_str("COSTAPP_INGEST_QUEUE", "celery")
COSTAPP_LIVE_QUEUE = env_str("COSTAPP_LIVE_QUEUE", "live")
CELERY_TASK_ROUTES = [
    # One task runs every pipeline step; it goes to its step's queue.
    "costapp.pipeline.routing.route",
    {
        "costapp.tasks.ingest_run_task": {"queue": COSTAPP_INGEST_QUEUE},
        "costapp.costs.tasks.focus_import_task": {"queue": COSTAPP_INGEST_QUEUE},
        "costapp.costs.tasks.bills_refresh_task": {"queue": COSTAPP_LIVE_QUEUE},
        # The refresh and its parts (a large fleet is read on every live slot).
        "costapp.telemetry.tasks.*": {"queue": COSTAPP_LIVE_QUEUE},
        "costapp.pipeline.tasks.*": {"queue": COSTAPP_LIVE_QUEUE},
        "costapp.tasks.*": {"queue": COSTAPP_LIVE_QUEUE},
        # Alerts on their own queue: a long backfill never delays a notification.
        "costapp.alerts.tasks.*": {"queue": "alerts"},
    },
]
# A pipeline step renews its lease every third of this while it works; a
# worker that dies loses it this long after its last renewal.
COSTAPP_PIPELINE_LEASE_S = env_int("COSTAPP_PIPELINE_LEASE_S", 60, minimum=5)
# The reaper sends a step again once this long has passed since its last task
# was sent with no worker claiming it (a broker that lost it).
COSTAPP_PIPELINE_REQUEUE_S = env_int("COSTAPP_PIPELINE_REQUEUE_S", 120, minimum=5)

# The JSON API (costapp/api, docs/api.md): read-only, bearer tokens only (no
# session, so no CSRF question), JSON only, bounded pages.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["costapp.api.auth.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["costapp.api.auth.HasPermission"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [],
    "DEFAULT_PAGINATION_CLASS": "costapp.api.pagination.Pagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "costapp.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "URL_FORMAT_OVERRIDE": None,
    "COERCE_DECIMAL_TO_STRING": True,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "costapp API",
    "DESCRIPTION": "Read-only unit costs, baselines, spend, idle dollars, budgets "
    "and alerts. Money is a decimal string beside its currency.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "PREPROCESSING_HOOKS": ["costapp.api.errors.only_v1"],
}

# The bearer token Prometheus sends to scrape /metrics; unset, /metrics is 404
# unless a user holds a token with the metrics scope (costapp/api/tokens.py).
COSTAPP_METRICS_TOKEN = env_str("COSTAPP_METRICS_TOKEN", "")
PROMETHEUS_URL = env_str("PROMETHEUS_URL", "")
PROMETHEUS_USERNAME = env_str("PROMETHEUS_USERNAME", "")
PROMETHEUS_PASSWORD = env_str("PROMETHEUS_PASSWORD", "")
PROMETHEUS_BEARER_TOKEN = env_str("PROMETHEUS_BEARER_TOKEN", "")
PROMETHEUS_CA_BUNDLE = env_str("PROMETHEUS_CA_BUNDLE", "")
PROMETHEUS_TIMEOUT_S = env_float("PROMETHEUS_TIMEOUT_S", 30.0, minimum=0.1)
PROMETHEUS_MAX_SAMPLES = env_int("PROMETHEUS_MAX_SAMPLES", 20_000_000, minimum=1000)
PROMETHEUS_CONCURRENCY = env_int("PROMETHEUS_CONCURRENCY", 4, minimum=1)
# Compressed answers cost more CPU than they save on loopback or a LAN; turn on
# across a WAN or a metered link (docs/telemetry.md).
PROMETHEUS_GZIP = env_bool("PROMETHEUS_GZIP", False)
# Extra headers, e.g. X-Scope-OrgID=tenant for Grafana Mimir.
PROMETHEUS_HEADERS = env_mapping("PROMETHEUS_HEADERS")
# The beat refresh re-reads this many trailing hours (late scrapes, restarts).
TELEMETRY_REFRESH_HOURS = env_int("TELEMETRY_REFRESH_HOURS", 3, minimum=1)
# Deployments per refresh run: a larger fleet is read in parts, one per live
# worker slot at a time (docs/benchmarks.md: 1,000 take a worker ~13 s).
TELEMETRY_REFRESH_SPLIT = env_int("TELEMETRY_REFRESH_SPLIT", 500, minimum=1)
# How often Prometheus scrapes the engines and exporters. An hour is closed,
# and judged, two scrape intervals after its end (samples stamped just before
# the hour ends may reach Prometheus a scrape later); a day likewise.
TELEMETRY_SCRAPE_INTERVAL_S = env_float(
    "TELEMETRY_SCRAPE_INTERVAL_S", 15.0, minimum=1.0, maximum=3600.0
)
COSTAPP_SETTLE_S = 2 * TELEMETRY_SCRAPE_INTERVAL_S

# AWS credentials and endpoint come from boto3's own chain (environment,
# profile, IAM role, AWS_ENDPOINT_URL); only the accounts to watch are ours.
COST_EXPLORER_ACCOUNTS = env_list("COST_EXPLORER_ACCOUNTS", "")
COST_EXPLORER_BUDGET_USD = env_float("COST_EXPLORER_BUDGET_USD", 1.0, minimum=0)

COSTAPP_DEMO = env_bool("COSTAPP_DEMO", False)

# Uploads (FOCUS exports, calibrations) are cut off while they stream in, at
# this many bytes (costapp/costs/uploads.py); FOCUS files wait for the worker
# in COSTAPP_UPLOAD_DIR, which docker-compose.yml shares between web and worker.
COSTAPP_UPLOAD_MAX_BYTES = env_int(
    "COSTAPP_UPLOAD_MAX_BYTES", 256 * 1024 * 1024, minimum=1024
)
COSTAPP_UPLOAD_DIR = Path(env_str("COSTAPP_UPLOAD_DIR", str(VAR_DIR / "uploads")))
# A FOCUS file may decompress to at most this many bytes, and to at most
# COSTAPP_FOCUS_MAX_INFLATION times its size beyond 16 MiB (a gzip bomb).
COSTAPP_FOCUS_MAX_DECOMPRESSED_BYTES = env_int(
    "COSTAPP_FOCUS_MAX_DECOMPRESSED_BYTES", 1024 * 1024 * 1024, minimum=1024
)
COSTAPP_FOCUS_MAX_INFLATION = env_int("COSTAPP_FOCUS_MAX_INFLATION", 100, minimum=2)
# The only S3 locations the FOCUS form may read (s3://bucket/prefix/, comma
# separated); empty: uploads only. Local server paths are never read from the web.
COSTAPP_FOCUS_S3_PREFIXES = env_list("COSTAPP_FOCUS_S3_PREFIXES", "")
# Month-end finance exports (CSV and Parquet by day, with their summary):
# a folder or s3://bucket/prefix; empty, none. The previous month is written
# once it is this many days old (bills lag a day or two, and restate), and
# again under its complete name if it was written with days missing.
COSTAPP_MONTHLY_EXPORT_TO = env_str("COSTAPP_MONTHLY_EXPORT_TO", "")
COSTAPP_MONTHLY_EXPORT_AFTER_DAYS = env_int(
    "COSTAPP_MONTHLY_EXPORT_AFTER_DAYS", 3, minimum=0, maximum=27
)
COSTAPP_MONTHLY_EXPORT_BASIS = env_str("COSTAPP_MONTHLY_EXPORT_BASIS", "amortized")
# A bill line at or above this amount (in its currency) is stored and flagged
# for review, not refused: a real all-upfront fee can be this large.
COSTAPP_BILL_REVIEW_THRESHOLD = env_float(
    "COSTAPP_BILL_REVIEW_THRESHOLD", 10_000_000.0, minimum=0
)
FILE_UPLOAD_HANDLERS = [
    "costapp.costs.uploads.CappedUploadHandler",
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "django.core.files.uploadhandler.TemporaryFileUploadHandler",
]

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "127.0.0.1")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "costapp@localhost")

# --- Alerts (docs/alerts.md) -------------------------------------------------------
# Fernet keys, comma-separated, newest first: the first encrypts, all decrypt
# (``manage.py alerts_secrets_rotate`` re-encrypts with the first). Unset, a
# key derived from SECRET_KEY keeps a laptop working; production requires them
# (a ``check --deploy`` error, costapp/alerts/checks.py). docs/security.md.
COSTAPP_SECRET_KEYS = [
    key for key in re.split(r"[,\s]+", env_str("COSTAPP_SECRET_KEYS", "")) if key
]
for _i, _key in enumerate(COSTAPP_SECRET_KEYS, 1):
    try:
        _valid = len(base64.urlsafe_b64decode(_key.encode())) == 32
    except (ValueError, binascii.Error):
        _valid = False
    if not _valid:
        # The position, never the value: this message reaches logs.
        raise EnvError(
            f"COSTAPP_SECRET_KEYS: key {_i} is not a Fernet key (32 bytes, URL-safe "
            "base64); create one with python3 -c 'from cryptography.fernet import "
            "Fernet; print(Fernet.generate_key().decode())'"
        )
# Private ranges an on-premises webhook receiver may live in (CIDR list).
# Loopback, link-local and the unspecified address are never admitted.
COSTAPP_WEBHOOK_ALLOWED_NETWORKS = env_list("COSTAPP_WEBHOOK_ALLOWED_NETWORKS", "")
for _net in COSTAPP_WEBHOOK_ALLOWED_NETWORKS:
    try:
        _parsed = ipaddress.ip_network(_net, strict=False)
    except ValueError as _exc:
        raise EnvError(f"COSTAPP_WEBHOOK_ALLOWED_NETWORKS={_net!r}: {_exc}") from None
    if (
        _parsed.network_address.is_loopback
        or _parsed.network_address.is_link_local
        or _parsed.network_address.is_unspecified
        or _parsed.prefixlen == 0
    ):
        raise EnvError(
            f"COSTAPP_WEBHOOK_ALLOWED_NETWORKS={_net!r}: loopback, link-local and "
            "0.0.0.0/:: are never admitted"
        )
# Test-only: lets the test suite reach its loopback receiver. Tests set it
# through pytest-django's settings fixture; from the environment it is refused.
COSTAPP_OUTBOUND_TEST_LOOPBACK = False
if "COSTAPP_OUTBOUND_TEST_LOOPBACK" in os.environ:
    raise EnvError(
        "COSTAPP_OUTBOUND_TEST_LOOPBACK is a test-only setting; production refuses it"
    )
COSTAPP_ALERTS_HOURLY_CAP = env_int("COSTAPP_ALERTS_HOURLY_CAP", 20, minimum=1)
COSTAPP_WEBHOOK_TIMEOUT_S = env_float("COSTAPP_WEBHOOK_TIMEOUT_S", 10.0, minimum=0.1)

# --- Security (docs/security.md) ----------------------------------------------------
# Proxies of our own in front of the app (a load balancer, an ingress): only
# then are X-Forwarded-For and X-Forwarded-Proto believed, and only as far as
# this many hops. 0 (the default) trusts no header a client could write.
COSTAPP_TRUSTED_PROXIES = env_int("COSTAPP_TRUSTED_PROXIES", 0, minimum=0)
if COSTAPP_TRUSTED_PROXIES:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# HSTS: start small (an hour) and raise it once HTTPS is known to work everywhere;
# browsers remember it for as long as it says.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Preloading is a commitment made by submitting the domain to the browsers'
# list, not a setting to nag about: opt in with SECURE_HSTS_PRELOAD=true.
SILENCED_SYSTEM_CHECKS = ["security.W021"]
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
# Load balancers and the compose healthcheck probe over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Sessions end after 12 hours without a request, and when the password or the
# user's groups change (costapp/access.py).
SESSION_COOKIE_AGE = 12 * 3600
SESSION_SAVE_EVERY_REQUEST = True
SESSION_COOKIE_HTTPONLY = True

# Login throttling (django-axes): by username *and* address, so one attacker
# behind a shared proxy cannot lock everyone out, nor one address lock out a
# user everywhere. The address comes through COSTAPP_TRUSTED_PROXIES.
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = env_float("AXES_COOLOFF_HOURS", 1.0, minimum=0.01)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_CLIENT_IP_CALLABLE = "costapp.access.client_ip"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False

# Content-Security-Policy (django-csp 4): scripts only from our own static
# files; pages hand data to them through json_script. plotly writes inline
# styles, hence style-src 'unsafe-inline' (styles cannot run code).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:", "blob:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}
    },
    "filters": {"one_line_denials": {"()": "costapp.logfilters.OneLineDenials"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # django-axes logs every successful login at INFO; failures and
        # lockouts are warnings and stay.
        "axes": {"level": "WARNING"},
        # A 403 is one line (user, request, missing permission), not a
        # traceback.
        "django.request": {"filters": ["one_line_denials"]},
    },
}
