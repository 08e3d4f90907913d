"""The docs page's rows, read from the OpenAPI schema (no JS: the page
renders on the server, under the product's CSP)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Parameter:
    name: str
    kind: str
    constraint: str
    description: str


@dataclass(frozen=True)
class ResponseField:
    name: str
    kind: str  # "decimal string or null", "date-time", ...
    description: str


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    summary: str
    description: str
    parameters: list[Parameter]
    statuses: list[tuple[str, str]]
    fields: list[ResponseField] = field(default_factory=list)


def _resolved(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with a local ``$ref`` followed (drf-spectacular's only kind)."""
    ref = spec.get("$ref", "")
    if ref.startswith("#/components/schemas/"):
        found: dict[str, Any] = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
        return found
    return spec


def _kind(spec: dict[str, Any]) -> str:
    kind = spec.get("format") or spec.get("type", "")
    if spec.get("format") == "decimal":
        kind = "decimal string"
    elif spec.get("type") == "array":
        kind = f"list of {spec.get('items', {}).get('type', 'objects')}"
    if "enum" in spec:
        kind += ": " + " | ".join(str(v) for v in spec["enum"] if v is not None)
    return kind + (" or null" if spec.get("nullable") else "")


def response_fields(schema: dict[str, Any], op: dict[str, Any]) -> list[ResponseField]:
    """The fields of one row of a 200 answer (a page's ``results`` item, or
    the object itself)."""
    content = op.get("responses", {}).get("200", {}).get("content", {})
    body = content.get("application/json", {}).get("schema")
    if not body:
        return []
    row = _resolved(schema, body)
    results = row.get("properties", {}).get("results")
    if results is not None:
        row = _resolved(schema, results.get("items", {}))
    return [
        ResponseField(name, _kind(spec), spec.get("description", ""))
        for name, spec in row.get("properties", {}).items()
    ]


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
                    fields=response_fields(schema, op),
                )
            )
    return out
