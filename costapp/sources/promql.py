"""PromQL label matchers: the one check every selector passes before it is
spliced into a query (fleet file, admin, telemetry form and command, stored
runs), so a selector can only narrow the series read, never add a clause.

``Hostname="x"} or {__name__=~".+"`` would otherwise turn one deployment's
read into a read of every series Prometheus holds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_OPERATORS = ("=~", "!~", "!=", "=")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t"}
# Longer than any real selector (the model column holds 500 characters).
MAX_LENGTH = 500


class SelectorError(ValueError):
    pass


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str


def selector_parse(text: str) -> list[Matcher]:
    """Parse PromQL label matchers without braces: ``a="x",b=~"y.*"``.

    Strict on purpose: a selector that Prometheus would reject (or, worse,
    accept with another meaning) must fail here, at load time, not at 3 am.
    """
    matchers: list[Matcher] = []
    i, n = 0, len(text)

    def skip_spaces() -> None:
        nonlocal i
        while i < n and text[i] in " \t":
            i += 1

    skip_spaces()
    if i == n:
        return matchers
    while True:
        skip_spaces()
        m = LABEL_NAME.match(text, i)
        if not m:
            raise SelectorError(f"expected a label name at position {i}: {text[i:]!r}")
        label = m.group(0)
        i = m.end()
        skip_spaces()
        op = next((o for o in _OPERATORS if text.startswith(o, i)), None)
        if op is None:
            raise SelectorError(
                f"expected one of = != =~ !~ after {label!r} at position {i}"
            )
        i += len(op)
        skip_spaces()
        if i >= n or text[i] != '"':
            raise SelectorError(
                f"value of {label!r} must be double-quoted (position {i})"
            )
        i += 1
        chars: list[str] = []
        while True:
            if i >= n:
                raise SelectorError(f"unterminated string in the value of {label!r}")
            c = text[i]
            if c == "\\":
                if i + 1 >= n or text[i + 1] not in _ESCAPES:
                    raise SelectorError(
                        f"bad escape in the value of {label!r} at position {i}"
                    )
                chars.append(_ESCAPES[text[i + 1]])
                i += 2
                continue
            if c == '"':
                i += 1
                break
            chars.append(c)
            i += 1
        value = "".join(chars)
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise SelectorError(
                    f"regex {value!r} of {label!r} does not compile: {exc}"
                ) from None
        matchers.append(Matcher(label, op, value))
        skip_spaces()
        if i == n:
            return matchers
        if text[i] != ",":
            raise SelectorError(f"expected ',' at position {i}: {text[i:]!r}")
        i += 1
        skip_spaces()
        if i == n:  # PromQL allows a trailing comma
            return matchers


def selector_reason(value: object) -> str | None:
    """Why a selector is refused, or None when it is a plain list of matchers."""
    if not isinstance(value, str):
        return "must be a string"
    text = value.strip()
    if "\x00" in text:
        # PostgreSQL text cannot hold it, and no label value needs it.
        return "contains a NUL byte"
    if len(text) > MAX_LENGTH:
        return f"longer than {MAX_LENGTH} characters"
    try:
        selector_parse(text)
    except SelectorError as exc:
        return str(exc)
    return None


def selector_problem(value: object) -> str | None:
    """What is wrong with a selector, as ``'<value>': <reason>``, or None."""
    reason = selector_reason(value)
    if reason is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        value = text if len(text) <= 80 else text[:77] + "..."
    return f"{value!r}: {reason}"


def selector_check(field: str, value: str) -> str:
    """The selector, stripped, or ``SelectorError`` naming the field and the
    value: ``dcgm_selector='Hostname="x"} or {...}': expected ',' ...``."""
    problem = selector_problem(value)
    if problem is not None:
        raise SelectorError(f"{field}={problem}")
    return value.strip()


def labels_match(matchers: Sequence[Matcher], labels: Mapping[str, str]) -> bool:
    """Whether a series with ``labels`` is one ``matchers`` select, as
    Prometheus decides it: a missing label reads as "", regular expressions
    are anchored at both ends."""
    for m in matchers:
        value = labels.get(m.label, "")
        if m.op == "=":
            ok = value == m.value
        elif m.op == "!=":
            ok = value != m.value
        else:
            found = re.fullmatch(m.value, value) is not None
            ok = found if m.op == "=~" else not found
        if not ok:
            return False
    return True
