"""A benchmark script's ``--smoke`` run, as the bench smoke tests make it: in
its own scratch PostgreSQL database, from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.services import scratch_database

ROOT = Path(__file__).resolve().parents[2]


def bench_smoke(script: str, *args: str, database: str) -> str:
    """Run ``bench/<script> --smoke *args`` in database ``database``; its
    output, once it exited 0."""
    with scratch_database(database) as url:
        done = subprocess.run(
            [sys.executable, f"bench/{script}", "--smoke", *args],
            cwd=ROOT,
            env=dict(os.environ, DATABASE_URL=url, PYTHONPATH=str(ROOT)),
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout
