#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what it needs, starts the
# services its tests talk to, then runs lint, the import contract, mypy, the
# suite on PostgreSQL and the smoke subset on SQLite (the embedded default).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
log() { printf '\n== %s\n' "$*"; }

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

# --- Debian packages for the real services and the browser -------------------
need=()
command -v pg_ctlcluster >/dev/null || need+=(postgresql)
command -v redis-server >/dev/null || need+=(redis-server)
command -v prometheus >/dev/null || need+=(prometheus)
command -v promtool >/dev/null || need+=(prometheus)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
# The system test runs the product's processes under a shifted clock.
command -v faketime >/dev/null || need+=(faketime)
command -v ip >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  log "installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null
fi

# --- Python environment ----------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(cat requirements.txt requirements-dev.txt requirements-harness.txt 2>/dev/null | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing Python requirements"
  .venv/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
  if [ -f requirements-harness.txt ]; then
    .venv/bin/pip install -q --disable-pip-version-check -r requirements-harness.txt
  fi
  echo "$want" > "$stamp"
fi

# --- Services ----------------------------------------------------------------------
bash scripts/services.sh

export DATABASE_URL="${TEST_DATABASE_URL:-postgres://costapp:costapp@127.0.0.1:5432/costapp}"
export REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/15}"
export PYTHONHASHSEED=0

log "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
log "import contracts (pyproject.toml: analytics is pure, areas and layers one-way)"
.venv/bin/lint-imports
log "mypy"
.venv/bin/mypy costapp analytics

log "test suite on PostgreSQL"
# Three workers on the CI machine's two cores: the suite waits on PostgreSQL,
# Chromium, subprocesses and the system test's clock for about a quarter of
# its time, so a third worker fills the waits (607 s against 795 s with two,
# same machine, 2026-12-07). A file stays on one worker, so a module-scoped
# demo seed runs once. PYTEST_WORKERS=0 runs in one process.
WORKERS="${PYTEST_WORKERS:-3}"
.venv/bin/pytest -p no:cacheprovider -n "$WORKERS" --dist loadfile --durations=30 "$@"

log "smoke subset on SQLite"
DATABASE_URL="sqlite:///$(mktemp -d)/smoke.sqlite3" .venv/bin/pytest -p no:cacheprovider \
  -n "$WORKERS" --dist loadfile -m smoke -q
