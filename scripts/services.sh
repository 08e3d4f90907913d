#!/usr/bin/env bash
# Start PostgreSQL and Redis on loopback if they are not running, and make sure
# the costapp role exists. Safe to run again.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  echo "starting PostgreSQL"
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
  if [ -z "$version" ]; then
    version=$(ls /usr/lib/postgresql | sort -V | tail -1)
    $SUDO pg_createcluster "$version" main >/dev/null
  fi
  # PostgreSQL refuses to run as root: pg_ctlcluster switches to the postgres user.
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start
  for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
# A role with a password works under trust and under scram/md5 (a fresh
# cluster): as the postgres user over the socket (peer auth on a fresh cluster),
# else over TCP (trust, as on machines that start PostgreSQL for us).
sql="$(dirname "$0")/ensure_role.sql"
as_postgres="sudo -u postgres"; [ "$(id -u)" -eq 0 ] && as_postgres="runuser -u postgres --"
if ! $as_postgres psql -q -h /var/run/postgresql -d postgres -v ON_ERROR_STOP=1 \
    < "$sql" 2>/dev/null; then
  psql -q -h 127.0.0.1 -U postgres -d postgres -v ON_ERROR_STOP=1 < "$sql"
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "starting Redis"
  mkdir -p /tmp/costapp-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" \
    --appendonly no --dir /tmp/costapp-redis --logfile /tmp/costapp-redis/redis.log
  for _ in $(seq 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.2; done
fi
