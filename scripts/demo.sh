#!/usr/bin/env bash
# The README's first command: a living dashboard on a laptop with only Python.
# Creates .venv from requirements.txt if it is missing, then sets up the demo
# (SQLite, tasks in-process, the demo fleet as the only source) and serves it.
# Extra arguments go to `manage.py demo`, e.g. scripts/demo.sh --port 8080.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv (first run only)..."
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --upgrade pip >/dev/null
fi
# Reinstall when requirements.txt changed since the last install (a pull).
stamp=.venv/.demo-requirements.sha
want=$(sha256sum requirements.txt | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "installing requirements.txt..."
  .venv/bin/python -m pip install -q -r requirements.txt
  echo "$want" > "$stamp"
fi

# A fresh clone has no var/: the SQLite file and local state live there.
mkdir -p "${COSTAPP_VAR_DIR:-var}"

export COSTAPP_DEMO=true
# Hashed, gzip-compressed static files (plotly.js ~1.5 MB on the wire, not
# 4.9); the same command as the Dockerfile's. A few seconds.
export COSTAPP_STATIC_COLLECTED=true
.venv/bin/python manage.py collectstatic --noinput -v 0 -i widgetbundle.js -i datasets
export DEBUG=${DEBUG:-false}
exec .venv/bin/python manage.py demo --serve "$@"
