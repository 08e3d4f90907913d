"""The docs page's rows, read from the OpenAPI schema (no JS: the page
renders on the server, under the product's CSP)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Parameter:
    name: str
    kind: str
    constraint: str
    description: str


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    description: str
    parameters: list[Parameter]
    statuses: list[tuple[str, str]]


def _constraint(schema: dict[str, Any]) -> str:
    parts = []
    if "enum" in schema:
        parts.append(" | ".join(str(v) for v in schema["enum"] if v is not None))
    if "minimum" in schema or "maximum" in schema:
        parts.append(f"{schema.get('minimum', '')}..{schema.get('maximum', '')}")
    if "pattern" in schema:
        parts.append(f"matches {schema['pattern']}")
    if "maxLength" in schema:
        parts.append(f"at most {schema['maxLength']} characters")
    if "default" in schema:
        parts.append(f"default {schema['default']}")
    return "; ".join(parts)


def operations(schema: dict[str, Any]) -> list[Operation]:
    out = []
    for path, methods in sorted(schema.get("paths", {}).items()):
        for method, op in methods.items():
            params = [
                Parameter(
                    name=p["name"],
                    kind=p.get("schema", {}).get("format")
                    or p.get("schema", {}).get("type", ""),
                    constraint=_constraint(p.get("schema", {})),
                    description=p.get("description", ""),
                )
                for p in op.get("parameters", [])
            ]
            out.append(
                Operation(
                    method=method.upper(),
                    path=path,
                    summary=op.get("summary", ""),
                    description=op.get("description", ""),
                    parameters=params,
                    statuses=[
                        (code, r.get("description", ""))
                        for code, r in sorted(op.get("responses", {}).items())
                    ],
                )
            )
    return out
