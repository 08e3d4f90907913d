"""Helpers exist once (issue 23): one input-error type and one value-quoting
helper (analytics/errors.py), one UTC-midnight helper (costapp/days.py), one
file-problems type (costapp/yamlfile.py). The scan reads the source with
``ast``; each rule is shown catching a deliberate second definition."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("costapp", "analytics")
HOMES = {
    "input-error type": "analytics/errors.py",
    "value-quoting helper": "analytics/errors.py",
    "UTC-midnight helper": "costapp/days.py",
    "file-problems type": "costapp/yamlfile.py",
}

pytestmark = pytest.mark.smoke


def _params(fn: ast.FunctionDef) -> list[str]:
    return [a.arg for a in fn.args.args + fn.args.kwonlyargs]


def _init(cls: ast.ClassDef) -> ast.FunctionDef | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return node
    return None


def _base_names(cls: ast.ClassDef) -> set[str]:
    return {ast.unparse(b).rsplit(".", 1)[-1] for b in cls.bases}


def _is_utc_midnight(node: ast.AST) -> bool:
    """``datetime.combine(d, time(...) | datetime.min.time(), tzinfo=UTC)``
    or ``x.replace(hour=0, minute=0, second=0, microsecond=0)``."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr == "combine" and len(node.args) >= 2:
        second = ast.unparse(node.args[1])
        zone = [ast.unparse(v) for v in node.args[2:]] + [
            ast.unparse(k.value) for k in node.keywords if k.arg == "tzinfo"
        ]
        midnight = second in ("time()", "time(0)", "datetime.min.time()", "time.min")
        return midnight and any(z.endswith("UTC") for z in zone)
    if node.func.attr == "replace":
        zeroed = {k.arg for k in node.keywords if ast.unparse(k.value) == "0"}
        return {"hour", "minute", "second", "microsecond"} <= zeroed
    return False


def _has_repr(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and ast.unparse(n.func) == "repr"
        for n in ast.walk(node)
    )


def _cuts_a_repr(fn: ast.FunctionDef) -> bool:
    """Quotes a value: cuts the text of a ``repr()`` to a length (directly,
    or through a name assigned from it; a digest of a repr is no quote)."""
    quoted = {
        t.id
        for n in ast.walk(fn)
        if isinstance(n, ast.Assign) and _has_repr(n.value)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    return any(
        isinstance(n, ast.Subscript)
        and isinstance(n.slice, ast.Slice)
        and (
            (isinstance(n.value, ast.Call) and ast.unparse(n.value.func) == "repr")
            or (isinstance(n.value, ast.Name) and n.value.id in quoted)
        )
        for n in ast.walk(fn)
    )


def definitions(tree: ast.AST) -> Iterator[tuple[str, str, int]]:
    """(kind, name, line) of each shared-kit definition in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            init = _init(node)
            params = _params(init) if init else []
            if {"field", "value", "reason"} <= set(params) and not (
                {"InvalidInput", "Refused"} & _base_names(node)
            ):
                yield "input-error type", node.name, node.lineno
            if params[1:2] == ["path"] and {"errors", "problems"} & set(params):
                yield "file-problems type", node.name, node.lineno
        elif isinstance(node, ast.FunctionDef):
            if node.name.lstrip("_") == "shown" or _cuts_a_repr(node):
                yield "value-quoting helper", node.name, node.lineno
            returns = [n.value for n in ast.walk(node) if isinstance(n, ast.Return)]
            midnight = "midnight" in node.name or node.name.endswith("day_start")
            if midnight or any(v is not None and _is_utc_midnight(v) for v in returns):
                yield "UTC-midnight helper", node.name, node.lineno


def product_definitions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {kind: [] for kind in HOMES}
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            for kind, name, line in definitions(ast.parse(path.read_text())):
                found[kind].append(f"{rel}:{line} {name}")
    return found


def test_each_shared_helper_is_defined_once_in_its_home() -> None:
    found = product_definitions()
    for kind, home in HOMES.items():
        elsewhere = [d for d in found[kind] if not d.startswith(f"{home}:")]
        assert not elsewhere, f"a second {kind} (use {home}): {elsewhere}"
        assert found[kind], f"no {kind} found in {home}: did the scan go blind?"


def test_no_utc_midnight_is_spelled_out_outside_costapp_days() -> None:
    spelled = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for top in PRODUCT
        for path in sorted((ROOT / top).rglob("*.py"))
        if path.relative_to(ROOT) != Path(HOMES["UTC-midnight helper"])
        for node in ast.walk(ast.parse(path.read_text()))
        if _is_utc_midnight(node)
    ]
    assert not spelled, f"use costapp.days (utc_midnight, day_start): {spelled}"


SECOND_DEFINITIONS = {
    "input-error type": """
class BadValue(ValueError):
    def __init__(self, field, value, reason):
        super().__init__(f"{field}={value!r}: {reason}")
""",
    "value-quoting helper": """
def _quote(value):
    text = repr(value)
    return text[:100] + "..." if len(text) > 100 else text
""",
    "UTC-midnight helper": """
def _start_of(day):
    return datetime.combine(day, time(), tzinfo=UTC)
""",
    "file-problems type": """
class RulesFileError(ValueError):
    def __init__(self, path, errors):
        super().__init__(f"{path}: {len(errors)} problem(s)")
""",
}


@pytest.mark.parametrize("kind", sorted(SECOND_DEFINITIONS))
def test_the_scan_catches_a_deliberate_second_definition(kind: str) -> None:
    tree = ast.parse(SECOND_DEFINITIONS[kind])
    assert [k for k, _, _ in definitions(tree)] == [kind]


def test_a_subclass_of_the_one_input_error_is_not_a_second_type() -> None:
    tree = ast.parse(
        "class Refused(InvalidInput):\n"
        "    def __init__(self, field, value, reason, *, code):\n"
        "        super().__init__(field, value, reason)\n"
    )
    assert list(definitions(tree)) == []
