from __future__ import annotations

from typing import Any

from django.test import Client


def api_get(path: str, token: str | None, **params: Any) -> Any:
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return Client().get(path, params, **headers)


def all_rows(path: str, token: str, **params: Any) -> list[dict[str, Any]]:
    """Every page of a list endpoint."""
    rows: list[dict[str, Any]] = []
    page = 1
    while True:
        response = api_get(path, token, page=page, page_size=1000, **params)
        assert response.status_code == 200, response.content
        body = response.json()
        rows.extend(body["results"])
        if body["next"] is None:
            assert body["count"] == len(rows)
            return rows
        page += 1
