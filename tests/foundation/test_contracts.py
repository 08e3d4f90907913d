"""The import contracts in pyproject.toml hold, and each one is shown failing
on a deliberately added violation: a contract that cannot fail guards nothing
(a misspelt module or an empty layer would keep it "kept" for ever).

The graph is built once with grimp (as lint-imports builds it); each contract
is checked on the real graph, then on a copy with one import added that
breaks it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter import configuration
from importlinter.application.use_cases import (
    _get_built_in_contract_types,
    read_user_options,
)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.smoke

# One import per contract that it must refuse: (importer, imported).
VIOLATIONS: dict[str, tuple[str, str]] = {
    "analytics is pure: it never imports Django or costapp": (
        "analytics.unit_cost_figures", "django"),
    "areas in one order: urls > views > saved_views > fleet > api > pipeline > alerts"
    " > economics > capacity > costs | telemetry > ingest > sources": (
        "costapp.costs.selectors", "costapp.economics.figures"),
    "within each area: urls > views > tasks > services > selectors": (
        "costapp.economics.idle.selectors", "costapp.economics.idle.services"),
    "only tasks, views and commands import Celery or a tasks module": (
        "costapp.economics.unit_costs.services", "costapp.pipeline.tasks"),
    "sources are adapters: no ORM (every area is above them)": (
        "costapp.sources.focus", "costapp.models"),
    "alerts reach no other area's code, only the models": (
        "costapp.alerts.evaluation", "costapp.economics.figures"),
    "the models are a leaf: they import no area": (
        "costapp.models.economics", "costapp.economics.figures"),
    "capacity imports nothing from the demo": (
        "costapp.capacity.selectors", "costapp.sources.demo.story"),
    "capacity: views -> tables (text) -> whatif (engine) -> selectors (reads)": (
        "costapp.capacity.selectors", "costapp.capacity.tables"),
    "api: urls -> views and pages -> serializers -> selectors": (
        "costapp.api.selectors", "costapp.api.serializers"),
    "costs: export.build -> export.day_rows -> export.reads -> export.rows"
    " -> allocations -> selectors": ("costapp.costs.selectors", "costapp.costs.allocations"),
    "no import circles: sibling modules and packages never import each other both ways": (
        "analytics.clocks", "analytics.unit_cost_figures"),
}  # fmt: skip

# A second way to break the Celery rule: a service importing Celery itself.
CELERY_IN_A_SERVICE = ("costapp.costs.services", "celery")


@pytest.fixture(scope="module")
def contracts() -> tuple[dict[str, Any], grimp.ImportGraph]:
    configuration.configure()
    options = read_user_options(str(ROOT / "pyproject.toml"))
    session = options.session_options
    graph = grimp.build_graph(
        *session["root_packages"],
        include_external_packages=True,
        exclude_type_checking_imports=True,
        cache_dir=None,
    )
    types = dict(_get_built_in_contract_types())
    built = {
        o["name"]: types[o["type"]](
            name=o["name"], session_options=session, contract_options=o
        )
        for o in options.contracts_options
    }
    return built, graph


def test_every_contract_has_a_deliberate_violation(
    contracts: tuple[dict[str, Any], grimp.ImportGraph],
) -> None:
    built, _ = contracts
    assert sorted(built) == sorted(VIOLATIONS)


@pytest.mark.parametrize("name", sorted(VIOLATIONS))
def test_the_contract_holds_and_refuses_its_violation(
    contracts: tuple[dict[str, Any], grimp.ImportGraph], name: str
) -> None:
    built, graph = contracts
    contract = built[name]
    assert contract.check(copy.deepcopy(graph), verbose=False).kept, name
    importer, imported = VIOLATIONS[name]
    for module in (importer, imported):
        assert module in graph.modules, f"{module} is not in the graph: fix the test"
    broken = copy.deepcopy(graph)
    broken.add_import(
        importer=importer, imported=imported, line_number=1, line_contents="deliberate"
    )
    assert not contract.check(broken, verbose=False).kept, (name, importer, imported)


def test_a_service_importing_celery_itself_is_refused(
    contracts: tuple[dict[str, Any], grimp.ImportGraph],
) -> None:
    built, graph = contracts
    name = "only tasks, views and commands import Celery or a tasks module"
    broken = copy.deepcopy(graph)
    importer, imported = CELERY_IN_A_SERVICE
    broken.add_import(
        importer=importer, imported=imported, line_number=1, line_contents="deliberate"
    )
    assert not built[name].check(broken, verbose=False).kept
