"""A webhook receiver process: verifies the Standard Webhooks signature of
each POST with the reference package and appends one JSON line per request
(when, whether it verified, the body). Started by tests.support.netns inside
a network namespace:

    python -m tests.support.webhook_receiver --bind 10.200.1.2 --port 8080 --log out.jsonl

The reference package refuses a ``webhook-timestamp`` five minutes from its
own clock. A sender under a shifted clock (a system test's libfaketime) is
judged by that clock: the seconds to add to this process's clock are read
from ``--clock-offset-file`` at each request (0 without one).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import standardwebhooks.webhooks
from standardwebhooks import Webhook


def _shifted_datetime(offset: Path | None) -> type[datetime.datetime]:
    class Shifted(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> Shifted:  # type: ignore[override]
            seconds = float(offset.read_text()) if offset and offset.exists() else 0.0
            return super().now(tz) + datetime.timedelta(seconds=seconds)  # type: ignore[return-value]

    return Shifted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--clock-offset-file", type=Path, default=None)
    args = parser.parse_args()
    standardwebhooks.webhooks.datetime = _shifted_datetime(args.clock_offset_file)  # type: ignore[misc]
    verifier = Webhook(os.environ["WEBHOOK_SECRET"])
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                verifier.verify(body, headers)
                verified = True
            except Exception:
                verified = False
            line = json.dumps(
                {
                    "received_at": time.time(),
                    "verified": verified,
                    "webhook_id": headers.get("webhook-id"),
                    "body": json.loads(body or b"null"),
                }
            )
            with lock, args.log.open("a") as f:
                f.write(line + "\n")
            self.send_response(200 if verified else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer((args.bind, args.port), Handler)
    Path(f"{args.log}.ready").write_text("ok")
    server.serve_forever()


if __name__ == "__main__":
    main()
