"""``check --deploy`` with the README's production environment, and without."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.smoke


def readme_production_environment(key_file: Path) -> dict[str, str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("### Production settings", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README: no environment block under Production settings"
    env = dict(
        line.split("=", 1) for line in block.group(1).splitlines() if "=" in line
    )
    env["SECRET_KEY_FILE"] = str(key_file)
    keys = key_file.parent / "secret_keys"
    keys.write_text(Fernet.generate_key().decode() + "\n")
    env["COSTAPP_SECRET_KEYS_FILE"] = str(keys)
    return env


def deploy_check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SECURE_", "SESSION_", "CSRF_", "SECRET_", "DEBUG"))
    }
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_readme_production_environment_passes_check_deploy(
    tmp_path: Path,
) -> None:
    key = tmp_path / "key"
    key.write_text("k" * 10 + "Zq8v2mLr7TyXw3nBp5sD1fGh6jKa9cEo4uIiQ0WzxRtYvNbMl\n")
    result = deploy_check(readme_production_environment(key))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_development_defaults_fail_check_deploy() -> None:
    result = deploy_check({})
    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stdout + result.stderr, warning


def test_a_published_or_short_secret_key_stops_start_up(tmp_path: Path) -> None:
    for key in ("change-me-to-a-long-random-string-before-any-real-use", "short"):
        path = tmp_path / "key"
        path.write_text(key)
        env = readme_production_environment(path)
        result = deploy_check(env)
        assert result.returncode != 0
        assert "SECRET_KEY" in result.stderr
