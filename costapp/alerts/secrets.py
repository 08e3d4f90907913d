"""Channel secrets at rest: MultiFernet over ``COSTAPP_SECRET_KEYS``.

The first key encrypts, every key decrypts, so a new key goes first and
``alerts_secrets_rotate`` re-encrypts every row with it before the old one is
dropped. Unset (a laptop), the key is derived from ``SECRET_KEY``; keys
derived from ``SECRET_KEY`` and ``SECRET_KEY_FALLBACKS`` keep decrypting once
``COSTAPP_SECRET_KEYS`` is set, so moving to it never strands a secret. The key
derived from the published development ``SECRET_KEY`` protects nothing: only
rotation reads with it (to move a laptop's secrets under a real key), unless it
is the one key there is. ``scrub`` takes every secret a channel holds out of a
text before it is stored (``Delivery.error``, ``Channel.last_error``) or logged.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import secrets as _random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

WEBHOOK_SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, not a secret)
# What an operator does when a secret cannot be decrypted; every refusal says it.
ROTATION_STEPS = (
    "set COSTAPP_SECRET_KEYS=NEW,OLD (newest first; OLD: the key these secrets "
    "were encrypted with, or for secrets from before COSTAPP_SECRET_KEYS the old "
    "SECRET_KEY in SECRET_KEY_FALLBACKS), then run manage.py alerts_secrets_rotate"
)


class SecretError(ValueError):
    pass


@dataclass(frozen=True)
class Key:
    label: str  # names the setting it comes from, never its value
    fernet: Fernet
    public: bool = False  # derived from the published development SECRET_KEY


def derived_key(secret_key: str) -> str:
    """The Fernet key a ``SECRET_KEY`` stands for when COSTAPP_SECRET_KEYS is
    unset (documented; tests rebuild old states with it)."""
    digest = hashlib.sha256(("costapp-alerts:" + secret_key).encode()).digest()
    return base64.urlsafe_b64encode(digest).decode()


def _key(label: str, value: str, *, public: bool = False) -> Key:
    try:
        return Key(label, Fernet(value.encode()), public)
    except ValueError as exc:
        raise SecretError(f"{label}: not a Fernet key ({exc})") from None


def keys(*, rotation: bool = False) -> list[Key]:
    """Every key that decrypts, the one that encrypts first. ``rotation`` adds
    the key derived from the development SECRET_KEY (alerts_secrets_rotate)."""
    development = settings.COSTAPP_DEVELOPMENT_SECRET_KEY
    configured = list(settings.COSTAPP_SECRET_KEYS)
    found = [
        _key(f"COSTAPP_SECRET_KEYS[{i}]", value)
        for i, value in enumerate(configured, 1)
    ]
    derived = [("SECRET_KEY", settings.SECRET_KEY)] + [
        (f"SECRET_KEY_FALLBACKS[{i}]", old)
        for i, old in enumerate(settings.SECRET_KEY_FALLBACKS, 1)
    ]
    for name, secret_key in derived:
        public = secret_key == development
        if public and found and not rotation:
            continue  # a real key exists: the published one only rotates
        found.append(
            _key(f"the key derived from {name}", derived_key(secret_key), public=public)
        )
    if rotation and not any(k.public for k in found):
        found.append(
            _key(
                "the key derived from the development SECRET_KEY",
                derived_key(development),
                public=True,
            )
        )
    return found


def _fernet() -> MultiFernet:
    return MultiFernet([k.fernet for k in keys()])


def token_key(token: str, candidates: list[Key]) -> tuple[Key, bytes] | None:
    """The first of ``candidates`` that decrypts ``token``, with the text."""
    for key in candidates:
        try:
            return key, key.fernet.decrypt(token.encode())
        except InvalidToken:
            continue
    return None


def token_made_at(token: str) -> datetime | None:
    """When a Fernet token was made (its clear header): which key to add back
    is the one that was first in COSTAPP_SECRET_KEYS then."""
    try:
        raw = base64.urlsafe_b64decode(token.encode())
        if len(raw) < 9 or raw[0] != 0x80:
            return None
        return datetime.fromtimestamp(int.from_bytes(raw[1:9], "big"), UTC)
    except (ValueError, binascii.Error, OverflowError, OSError):
        return None


def config_encrypt(config: dict[str, Any]) -> str:
    return _fernet().encrypt(json.dumps(config, sort_keys=True).encode()).decode()


def config_decrypt(token: str) -> dict[str, Any]:
    try:
        data = _fernet().decrypt(token.encode())
    except InvalidToken:
        raise SecretError(
            "a channel's settings cannot be decrypted with COSTAPP_SECRET_KEYS "
            f"(a key was removed before alerts_secrets_rotate ran?): {ROTATION_STEPS}"
        ) from None
    result: dict[str, Any] = json.loads(data)
    return result


def webhook_secret_create() -> str:
    """32 random bytes, in the Standard Webhooks spelling ``whsec_<base64>``."""
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(_random.token_bytes(32)).decode()


def webhook_secret_key(secret: str) -> bytes:
    raw = secret.removeprefix(WEBHOOK_SECRET_PREFIX)
    try:
        return base64.b64decode(raw, validate=True)
    except ValueError:
        raise SecretError("a webhook secret must be whsec_<base64>") from None


def mask(value: str, *, keep: int = 4) -> str:
    if len(value) <= keep * 2:
        return "*" * len(value)
    return value[:keep] + "…" + "*" * 6 + value[-keep:]


# scheme, host (any user:password@ before it dropped), the rest.
_URL = re.compile(
    r"^(https?)://(?:[^/?#]*@)?([^/?#@]*)(.*)$", re.IGNORECASE | re.DOTALL
)


def url_mask(url: str) -> str:
    """Scheme and host shown, path and query (where hooks keep the credential)
    hidden."""
    match = _URL.match(url)
    if not match:
        return mask(url)
    scheme, host, rest = match.groups()
    return f"{scheme}://{host}" + ("/…" if rest.strip("/") else "")


def target_mask(url: str, *, keep: int = 4) -> str:
    """``scheme://host/…/abcd``: the last ``keep`` characters of the last path
    segment or query value tell two hooks on one host apart, and are shown only
    where that piece is long enough (4 ``keep``) that they do not give it away.
    What is hidden (the rest of a Slack, Discord, Teams or Google Chat path, a
    token in the query) is what sends."""
    match = _URL.match(url)
    if not match:
        return mask(url, keep=keep)
    scheme, host, rest = match.groups()
    last = re.split(r"[/?&=#]", rest.rstrip("/"))[-1]
    if len(last) >= keep * 4:
        return f"{scheme}://{host}/…/{last[-keep:]}"
    return url_mask(url)


_SLACK_PATH = re.compile(r"(hooks\.slack\.com/services/)[A-Za-z0-9/_-]+")
_WHSEC = re.compile(r"whsec_[A-Za-z0-9+/=]+")


def scrub(text: str, *, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """Remove the given secrets, any Slack hook path and any whsec_ from text."""
    for value in secrets:
        if value:
            text = text.replace(value, "***")
    text = _SLACK_PATH.sub(r"\1***", text)
    return _WHSEC.sub("whsec_***", text)


def config_secrets(config: dict[str, Any]) -> list[str]:
    """The values of a channel's settings that are credentials, longest first
    (a URL before the token inside it)."""
    found: list[str] = []
    for key in ("url", "secret", "previous_secret"):
        value = config.get(key)
        if isinstance(value, str) and value:
            found.append(value)
            if key == "url":
                found.extend(_url_parts(value))
    return sorted(set(found), key=len, reverse=True)


def _url_parts(url: str) -> list[str]:
    """Parts of a hook URL an error may quote without the rest: the path and
    query, the path, the last path segment (Slack, Discord), each query value
    (a webhook's token, Google Chat's key)."""
    try:
        parts = urlsplit(url)
        values = [v for _, v in parse_qsl(parts.query)]
    except ValueError:
        return []
    path = parts.path
    rest = path + ("?" + parts.query if parts.query else "")
    found = [rest, path, parts.query, path.rstrip("/").rsplit("/", 1)[-1], *values]
    # Shorter parts are words an error needs ("/hook"), not credentials.
    found = [part for part in found if len(part) >= 12]
    if "/services/" in url:
        found.append(url.split("/services/", 1)[1])
    return found
