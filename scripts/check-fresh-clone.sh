#!/usr/bin/env bash
# Checks what a fresh clone gets: a lean repository (no generated files tracked) and a quick start that builds
# only what it uses. Run by CI (.ci/run); needs git and cargo, builds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'check-fresh-clone: %s\n' "$*" >&2; }
failed=0
fail() { say "FAIL: $*"; failed=1; }

# The repository holds sources only: installed packages and build output are generated on the machine.
MAX_TRACKED_FILES=1000
tracked=$(git ls-files | wc -l)
if [ "$tracked" -gt "$MAX_TRACKED_FILES" ]; then
  fail "$tracked tracked files (bound: $MAX_TRACKED_FILES); is something generated committed? (git ls-files)"
fi
generated=$(git ls-files | grep -E '(^|/)(node_modules|target|test-services)/' | head -n 5 || true)
if [ -n "$generated" ]; then
  fail "generated files are tracked (git rm -r --cached them): $(printf '%s ' $generated)"
fi

# `cargo run --example quickstart` from the root selects the default members (Cargo.toml); cargo unifies their
# features, and the dependency tree of that selection is what the quick start builds (its dev-dependencies
# included). It must hold none of the broker clients and no HTTP stack, and `outbox-relay` no feature at all.
heavy='^(rdkafka|rdkafka-sys|async-nats|lapin|aws-sdk-sqs|redis|reqwest|axum|hyper|rustls|ring) '
quickstart_tree=$(cargo tree --locked -e normal,build,dev --prefix none)
unexpected=$(printf '%s\n' "$quickstart_tree" | grep -E "$heavy" | cut -d' ' -f1 | sort -u | tr '\n' ' ' || true)
if [ -n "$unexpected" ]; then
  fail "the quick start builds crates it does not use: $unexpected(see: cargo tree -i <crate>)"
fi
relay_features=$(cargo tree --locked -e features -i outbox-relay --prefix none | grep -o 'outbox-relay feature "[^"]*"' | sort -u | tr '\n' ' ' || true)
if [ -n "$relay_features" ]; then
  fail "the quick start enables features of outbox-relay: $relay_features(see: cargo tree -e features -i outbox-relay)"
fi

if [ "$failed" -ne 0 ]; then
  exit 1
fi
say "ok: $tracked tracked files, nothing generated tracked, the quick start resolves $(printf '%s\n' "$quickstart_tree" | sort -u | wc -l) packages (dev-dependencies included) and no broker client"
