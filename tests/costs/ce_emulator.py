"""A small AWS Cost Explorer for tests: GetCostAndUsage over HTTP on loopback.

It speaks the AWS JSON 1.1 protocol (``X-Amz-Target:
AWSInsightsIndexService.GetCostAndUsage``), answers from an in-memory ledger
by TimePeriod (End exclusive), groups by up to two keys, applies Filter
expressions (And/Or/Not, Dimensions, Tags), paginates with NextPageToken and
can inject errors (throttling N times, RequestChangedException,
DataUnavailableException, ...). moto's Cost Explorer only replays queued canned
pages and cannot inject errors, hence this.

boto3 reaches it through ``AWS_ENDPOINT_URL``; signatures are not checked.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TARGET = "AWSInsightsIndexService.GetCostAndUsage"


@dataclass
class Line:
    account: str
    start: str  # "2025-01-02" (daily) or "2025-01-02T05:00:00Z" (hourly)
    usage_type: str
    amount: str  # every cost metric unless ``amounts`` says otherwise
    record_type: str = "Usage"
    service: str = "Amazon Elastic Compute Cloud - Compute"
    region: str = "us-east-1"
    tags: dict[str, str] = field(default_factory=dict)
    quantity: str = "24"
    unit: str = "Hrs"
    amounts: dict[str, str] = field(default_factory=dict)

    def metric(self, name: str) -> tuple[Decimal, str]:
        if name == "UsageQuantity":
            return Decimal(self.quantity), self.unit
        return Decimal(self.amounts.get(name, self.amount)), "USD"


@dataclass
class Failure:
    code: str
    times: int
    page: int | None = None  # None: any page
    message: str = "injected by the test emulator"
    status: int = 400


class CostExplorerEmulator:
    def __init__(self, *, page_size: int = 50) -> None:
        self.ledger: list[Line] = []
        self.estimated: set[str] = set()  # period starts still estimated
        # period start -> the Amount text sent for every cost metric that day,
        # whatever the ledger says (a corrupt answer such as "abc")
        self.raw_amounts: dict[str, str] = {}
        self.page_size = page_size
        self.delay_s = 0.0
        self.failures: list[Failure] = []
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control -------------------------------------------------------------

    def fail(
        self,
        code: str,
        *,
        times: int = 1,
        page: int | None = None,
        message: str = "injected by the test emulator",
    ) -> None:
        with self.lock:
            self.failures.append(Failure(code, times, page, message))

    def add(self, *lines: Line) -> None:
        with self.lock:
            self.ledger.extend(lines)

    def start(self) -> str:
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                target = self.headers.get("X-Amz-Target", "")
                status, payload = emulator.handle(target, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def successful_pages(self) -> int:
        return sum(1 for c in self.calls if c["result"] == "ok")

    # -- protocol ------------------------------------------------------------

    def handle(self, target: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if target != TARGET:
            return 400, {"__type": "UnknownOperationException", "message": target}
        if self.delay_s:
            time.sleep(self.delay_s)
        token = body.get("NextPageToken")
        offset = json.loads(base64.b64decode(token))["offset"] if token else 0
        page = offset // self.page_size
        with self.lock:
            for failure in self.failures:
                if failure.times > 0 and failure.page in (None, page):
                    failure.times -= 1
                    self.calls.append(
                        {"page": page, "result": failure.code, "body": body}
                    )
                    return failure.status, {
                        "__type": failure.code,
                        "message": failure.message,
                    }
            items = self._items(body)
            self.calls.append({"page": page, "result": "ok", "body": body})
        chunk = items[offset : offset + self.page_size]
        results: list[dict[str, Any]] = []
        for period, group in chunk:
            if not results or results[-1]["TimePeriod"]["Start"] != period[0]:
                results.append(
                    {
                        "TimePeriod": {"Start": period[0], "End": period[1]},
                        "Total": {},
                        "Groups": [],
                        "Estimated": period[0] in self.estimated,
                    }
                )
            if group is not None:
                results[-1]["Groups"].append(group)
        out: dict[str, Any] = {
            "GroupDefinitions": body.get("GroupBy", []),
            "ResultsByTime": results,
            "DimensionValueAttributes": [],
        }
        if offset + self.page_size < len(items):
            out["NextPageToken"] = base64.b64encode(
                json.dumps({"offset": offset + self.page_size}).encode()
            ).decode()
        return 200, out

    def _items(self, body: dict[str, Any]) -> list[tuple[tuple[str, str], Any]]:
        granularity = body["Granularity"]
        start, end = body["TimePeriod"]["Start"], body["TimePeriod"]["End"]
        group_by = body.get("GroupBy", [])
        metrics = body["Metrics"]
        items: list[tuple[tuple[str, str], Any]] = []
        for p_start, p_end in _periods(start, end, granularity):
            groups: dict[tuple[str, ...], dict[str, list[Any]]] = {}
            for line in self.ledger:
                if line.start != p_start or not _matches(body.get("Filter"), line):
                    continue
                keys = tuple(_group_key(spec, line) for spec in group_by)
                acc = groups.setdefault(keys, {})
                for m in metrics:
                    value, unit = line.metric(m)
                    slot = acc.setdefault(m, [Decimal(0), unit])
                    slot[0] += value
            if not groups:
                items.append(((p_start, p_end), None))
            for keys, acc in sorted(groups.items()):
                items.append(
                    (
                        (p_start, p_end),
                        {
                            "Keys": list(keys),
                            "Metrics": {
                                m: {
                                    "Amount": self.raw_amounts.get(
                                        p_start, _amount(v[0])
                                    )
                                    if m != "UsageQuantity"
                                    else _amount(v[0]),
                                    "Unit": v[1],
                                }
                                for m, v in acc.items()
                            },
                        },
                    )
                )
        return items


def _amount(value: Decimal) -> str:
    # Cost Explorer prints plain decimals (never exponents).
    return format(value, "f")


def _periods(start: str, end: str, granularity: str) -> list[tuple[str, str]]:
    out = []
    if granularity == "HOURLY":
        t = datetime.fromisoformat(start.replace("Z", "+00:00")).astimezone(UTC)
        stop = datetime.fromisoformat(end.replace("Z", "+00:00")).astimezone(UTC)
        while t < stop:
            n = t + timedelta(hours=1)
            out.append(
                (t.strftime("%Y-%m-%dT%H:%M:%SZ"), n.strftime("%Y-%m-%dT%H:%M:%SZ"))
            )
            t = n
        return out
    d, stop_d = date.fromisoformat(start), date.fromisoformat(end)
    while d < stop_d:
        out.append((d.isoformat(), (d + timedelta(days=1)).isoformat()))
        d += timedelta(days=1)
    return out


def _dimension(line: Line, key: str) -> str:
    return {
        "LINKED_ACCOUNT": line.account,
        "SERVICE": line.service,
        "USAGE_TYPE": line.usage_type,
        "RECORD_TYPE": line.record_type,
        "REGION": line.region,
    }[key]


def _group_key(spec: dict[str, str], line: Line) -> str:
    if spec["Type"] == "TAG":
        return f"{spec['Key']}${line.tags.get(spec['Key'], '')}"
    return _dimension(line, spec["Key"])


def _matches(expr: dict[str, Any] | None, line: Line) -> bool:
    if not expr:
        return True
    if "And" in expr:
        return all(_matches(e, line) for e in expr["And"])
    if "Or" in expr:
        return any(_matches(e, line) for e in expr["Or"])
    if "Not" in expr:
        return not _matches(expr["Not"], line)
    if "Dimensions" in expr:
        d = expr["Dimensions"]
        return _dimension(line, d["Key"]) in d["Values"]
    if "Tags" in expr:
        t = expr["Tags"]
        return line.tags.get(t["Key"], "") in t.get("Values", [])
    raise ValueError(f"filter not understood by the emulator: {expr}")
