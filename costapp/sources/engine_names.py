"""Which of an engine table's names one instance exports, and which it misses."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from costapp.sources.engines import SGLANG_OTHER_PREFIXES, SGLANG_PREFIX, EngineTable


@dataclass(frozen=True)
class NamesUsed:
    found: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    generation: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _spelled_as_found(names: list[str], present: list[str]) -> list[str]:
    """Names in the SGLang spelling(s) the instance uses (its own when none
    is seen): a "sglang:" deployment misses no "sglang_" name."""
    spellings = (SGLANG_PREFIX, *SGLANG_OTHER_PREFIXES)
    used = {p for p in spellings if any(n.startswith(p) for n in present)}
    used = used or {SGLANG_PREFIX}
    return [
        n for n in names if not n.startswith(spellings) or n.startswith(tuple(used))
    ]


def names_used(table: EngineTable, found: Iterable[str]) -> NamesUsed:
    present = sorted(set(found) & set(table.roles))
    generation = table.generation(present)
    expected = _spelled_as_found(table.expected(generation), present)
    missing = [n for n in expected if n not in present]
    return NamesUsed(tuple(present), tuple(missing), generation)
