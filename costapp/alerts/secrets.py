"""Channel secrets at rest: MultiFernet over ``COSTAPP_SECRET_KEYS``.

The first key encrypts, every key decrypts, so a new key goes first and
``alerts_secrets_rotate`` re-encrypts every row with it before the old one is
dropped. ``scrub`` takes every secret a channel holds out of a text before it
is stored (``Delivery.error``, ``Channel.last_error``) or logged.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets as _random
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

WEBHOOK_SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, not a secret)


class SecretError(ValueError):
    pass


def _fernet() -> MultiFernet:
    keys = list(settings.COSTAPP_SECRET_KEYS)
    if not keys:
        # Laptop default: a key derived from SECRET_KEY (documented).
        digest = hashlib.sha256(
            ("costapp-alerts:" + settings.SECRET_KEY).encode()
        ).digest()
        keys = [base64.urlsafe_b64encode(digest).decode()]
    try:
        return MultiFernet([Fernet(k.encode()) for k in keys])
    except ValueError as exc:
        raise SecretError(f"COSTAPP_SECRET_KEYS: not a Fernet key ({exc})") from None


def config_encrypt(config: dict[str, Any]) -> str:
    return _fernet().encrypt(json.dumps(config, sort_keys=True).encode()).decode()


def config_decrypt(token: str) -> dict[str, Any]:
    try:
        data = _fernet().decrypt(token.encode())
    except InvalidToken:
        raise SecretError(
            "a channel's settings cannot be decrypted with COSTAPP_SECRET_KEYS "
            "(a key was removed before alerts_secrets_rotate ran?)"
        ) from None
    result: dict[str, Any] = json.loads(data)
    return result


def token_rotate(token: str) -> str:
    return _fernet().rotate(token.encode()).decode()


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


def url_mask(url: str) -> str:
    """Scheme and host shown, path (where Slack keeps the credential) hidden."""
    match = re.match(r"^(https?://[^/]+)(/.*)?$", url)
    if not match:
        return mask(url)
    return match.group(1) + ("/…" if match.group(2) else "")


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
            if key == "url" and "/services/" in value:
                found.append(value.split("/services/", 1)[1])
    return sorted(found, key=len, reverse=True)
