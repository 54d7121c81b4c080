#!/usr/bin/env bash
# The JS SDK's tests (node --test) against the real service started by each test file.
# Installs the dev dependency (playwright-core) from package-lock.json when missing.
# Usage: sdk/js/scripts/test.sh [node --test args...]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d node_modules/playwright-core ]; then
    npm ci --no-audit --no-fund --loglevel=error
fi
exec node --test "$@" test/
