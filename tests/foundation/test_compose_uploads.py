"""Uploads are stored where the worker reads them: a volume web and worker share."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from tests.foundation.test_compose import ROOT

pytestmark = pytest.mark.smoke


def _mounts(service: dict[str, Any]) -> dict[str, str]:
    """container path -> named volume"""
    out = {}
    for volume in service.get("volumes") or []:
        source, target = volume.split(":")[:2]
        if not source.startswith((".", "/")):
            out[target] = source
    return out


def _upload_dir(env: dict[str, Any]) -> PurePosixPath:
    """COSTAPP_UPLOAD_DIR as settings.py computes it with the service's
    environment, this checkout standing for the image's /app."""
    script = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.COSTAPP_UPLOAD_DIR)"
    )
    wanted = {"COSTAPP_VAR_DIR", "COSTAPP_UPLOAD_DIR"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={
            "PATH": os.environ.get("PATH", ""),
            "DJANGO_SETTINGS_MODULE": "costapp.settings",
            **{k: str(v) for k, v in env.items() if k in wanted},
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    folder = PurePosixPath(result.stdout.strip())
    if PurePosixPath(ROOT) in (folder, *folder.parents):
        folder = PurePosixPath("/app") / folder.relative_to(PurePosixPath(ROOT))
    return folder


def test_web_and_worker_share_the_volume_that_holds_uploads() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    holders = {}
    for name in ("web", "worker"):
        folder = _upload_dir(services[name]["environment"])
        mounts = _mounts(services[name])
        holding = [t for t in mounts if PurePosixPath(t) in (folder, *folder.parents)]
        assert holding, f"{name}: {folder} is on no named volume ({mounts})"
        target = max(holding, key=len)  # the innermost mount wins
        holders[name] = (mounts[target], target)
        assert mounts[target] in compose["volumes"], mounts[target]
    assert holders["web"] == holders["worker"], holders


def test_the_default_upload_dir_is_under_the_var_dir() -> None:
    from django.conf import settings

    assert settings.VAR_DIR in settings.COSTAPP_UPLOAD_DIR.parents
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "/app/var" in dockerfile and "WORKDIR /app" in dockerfile
