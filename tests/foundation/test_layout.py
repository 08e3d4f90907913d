"""House rules of the layout: no module longer than 600 lines (issue 13), no
function longer than 80 lines where the product's money is computed and
exported (issue 23)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600
FUNCTION_LIMIT = 80
# Where a reader follows money: each function there reads in one screen.
SHORT_FUNCTION_AREAS = ("costapp/economics", "costapp/costs")
# Named numeric kernels that are longer on purpose, each with its reason.
LONG_KERNELS: dict[str, str] = {}

pytestmark = pytest.mark.smoke


def test_no_module_under_costapp_or_analytics_is_longer_than_600_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for top in ("costapp", "analytics")
        for path in (ROOT / top).rglob("*.py")
        if "migrations" not in path.parts
        and (n := len(path.read_text().splitlines())) > LIMIT
    }
    assert not long, f"split these at their seams (README, Layout): {long}"


def function_lengths(path: Path) -> dict[str, int]:
    """Every function and method of ``path`` by qualified name, in lines
    (decorators and docstring included: what a reader scrolls through)."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                first = min([d.lineno for d in child.decorator_list] + [child.lineno])
                found[name] = (child.end_lineno or child.lineno) - first + 1
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(path.read_text()), "")
    return found


def test_no_function_in_economics_or_costs_is_longer_than_80_lines() -> None:
    long = {
        f"{path.relative_to(ROOT)}::{name}": n
        for area in SHORT_FUNCTION_AREAS
        for path in sorted((ROOT / area).rglob("*.py"))
        for name, n in function_lengths(path).items()
        if n > FUNCTION_LIMIT
        and f"{path.relative_to(ROOT)}::{name}" not in LONG_KERNELS
    }
    assert not long, (
        f"split these into named steps (or name the kernel and why): {long}"
    )


def test_the_length_rule_sees_a_long_method_inside_a_class(tmp_path: Path) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(FUNCTION_LIMIT))
    source = tmp_path / "m.py"
    source.write_text(f"class A:\n    @staticmethod\n    def long():\n{body}\n")
    assert function_lengths(source) == {"A.long": FUNCTION_LIMIT + 2}
