#!/usr/bin/env bash
# Start the local PostgreSQL cluster if it is not accepting connections (tests need it).
set -euo pipefail
host=${PGHOST:-127.0.0.1}
port=${PGPORT:-5432}
if pg_isready -q -h "$host" -p "$port" 2>/dev/null; then
  exit 0
fi
if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ]; then
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
fi
for _ in $(seq 1 30); do
  pg_isready -q -h "$host" -p "$port" 2>/dev/null && exit 0
  sleep 1
done
echo "PostgreSQL is not reachable on $host:$port" >&2
exit 1
