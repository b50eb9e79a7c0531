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

if [ "$failed" -ne 0 ]; then
  exit 1
fi
say "ok: $tracked tracked files, nothing generated tracked"
