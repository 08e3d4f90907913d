"""Strict readers for settings taken from the environment.

Every reader refuses junk with a message naming the variable and the value, so a
typo in a deployment manifest fails at start-up instead of silently falling back
to a default. Secrets may come from ``NAME_FILE`` (Docker and Kubernetes secrets).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


class EnvError(ValueError):
    pass


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise EnvError(f"{name}_FILE={file_name!r}: cannot read ({exc})") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise EnvError(f"{name}={raw!r}: expected one of true/false, 1/0, yes/no, on/off")


def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r}: expected an integer") from None
    if minimum is not None and value < minimum:
        raise EnvError(f"{name}={raw!r}: must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise EnvError(f"{name}={raw!r}: must be at most {maximum}")
    return value


def env_float(
    name: str,
    default: float,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise EnvError(f"{name}={raw!r}: expected a number") from None
    if not math.isfinite(value):
        raise EnvError(f"{name}={raw!r}: expected a finite number")
    if minimum is not None and value < minimum:
        raise EnvError(f"{name}={raw!r}: must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise EnvError(f"{name}={raw!r}: must be at most {maximum}")
    return value


def env_list(name: str, default: str = "") -> list[str]:
    raw = os.environ.get(name, default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_mapping(name: str) -> dict[str, str]:
    """``KEY=value,KEY2=value2`` (e.g. extra HTTP headers); junk is refused."""
    raw = env_str(name, "")
    out: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise EnvError(f"{name}={raw!r}: expected KEY=value[,KEY=value...]")
        out[key.strip()] = value.strip()
    return out


def database_from_url(url: str, *, base_dir: Path) -> dict[str, object]:
    """Translate ``DATABASE_URL`` into a Django ``DATABASES`` entry.

    Supports ``sqlite:///relative/path``, ``sqlite:////absolute/path`` and
    ``postgres://user:pass@host:port/name?sslmode=...``.
    """
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        path = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
        if not path:
            raise EnvError(f"DATABASE_URL={url!r}: sqlite URL needs a file path")
        file_path = Path(path) if Path(path).is_absolute() else base_dir / path
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(file_path),
            "OPTIONS": {
                # WAL: a reader (a slow export's snapshot) never blocks the
                # writer, nor the writer it; every page writes its session.
                # NORMAL is safe in WAL: a power cut may lose the last commits,
                # never the file.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
                # Writers still take turns (the demo ingests on a thread while
                # pages save sessions): one waits this long for another.
                "timeout": 30,
                # A write transaction takes the write lock at BEGIN: in WAL a
                # deferred one that read first and then writes fails at once
                # (SQLITE_BUSY_SNAPSHOT) instead of waiting. Read-only
                # snapshots begin DEFERRED (costs.export.reads.one_snapshot).
                "transaction_mode": "IMMEDIATE",
            },
        }
    if parsed.scheme in {"postgres", "postgresql", "pgsql"}:
        name = unquote(parsed.path.lstrip("/"))
        if not name:
            raise EnvError(f"DATABASE_URL={url!r}: missing database name")
        options = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "OPTIONS": options,
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }
    raise EnvError(
        f"DATABASE_URL={url!r}: unsupported scheme {parsed.scheme!r} "
        "(use sqlite:/// or postgres://)"
    )
