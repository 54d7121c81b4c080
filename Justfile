# Two commands are all a new machine needs: `just serve` and `just test`.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Make .venv if missing and install the project (with test tools) into it.
install:
    #!/usr/bin/env bash
    set -euo pipefail
    [ -x .venv/bin/python ] || python3 -m venv .venv
    stamp=".venv/.installed-$(cat pyproject.toml | sha1sum | cut -c1-12)"
    if [ ! -f "$stamp" ] || [ ! -x .venv/bin/cs ]; then
        .venv/bin/python -m pip install --quiet --upgrade pip
        .venv/bin/python -m pip install --quiet -e '.[test]'
        rm -f .venv/.installed-*
        touch "$stamp"
    fi

# Run the service in the embedded mode (SQLite, in-process worker) with a demo tenant.
serve *ARGS: install
    .venv/bin/cs serve --demo {{ARGS}}

# The whole test suite, against the embedded mode and PostgreSQL + Redis, then the JS
# SDK's tests; with ARGS, only pytest with them (e.g. `just test tests/api -k track`).
test *ARGS: install
    {{ if ARGS == "" { just_executable() + " test-all" } else { ".venv/bin/python -m pytest " + ARGS } }}

# The whole suite: the in-process tests spread over three pytest workers (each file on one
# worker, each worker its own PostgreSQL database and Redis prefix), then the tests that
# start processes, browsers or fault campaigns one at a time, then the JS SDK's tests.
test-all: install
    .venv/bin/python -m pytest -n 3 --dist loadfile tests/unit tests/api tests/cli tests/sdk
    .venv/bin/python -m pytest tests/integration tests/chaos tests/browser
    {{just_executable()}} test-js

# The JS SDK's tests (node --test) against the real service; installs chromium if missing.
test-js: install
    sdk/js/scripts/ensure-browser.sh
    sdk/js/scripts/test.sh

# Screenshots of every console page at desktop and phone width into docs/console/, made
# by the console's browser tests (installs chromium if missing).
screenshots: install
    sdk/js/scripts/ensure-browser.sh
    CS_SCREENSHOTS=docs/console .venv/bin/python -m pytest tests/browser -q -k "axe"

# A long fuzzing run of every route on both backends (docs/api.md, Fuzzing): EXAMPLES
# valid and as many invalid requests per operation (`just test` runs 10).
fuzz EXAMPLES="100": install
    CS_FUZZ_EXAMPLES={{EXAMPLES}} .venv/bin/python -m pytest tests/api/test_fuzz.py -q -s

# Apply migrations to the configured database.
migrate: install
    .venv/bin/cs db upgrade

# Benchmarks print their figures; see bench/.
bench: install
    .venv/bin/python bench/api_overhead.py

# The fault campaign (docs/chaos.md) for CS_CHAOS_SECONDS (default here 600) of faults:
# API and worker processes killed with -9, Redis and PostgreSQL restarted, under load.
chaos SECONDS="600": install
    CS_CHAOS_SECONDS={{SECONDS}} .venv/bin/python -m pytest tests/chaos -q -s -p no:cacheprovider

# Steady mixed load in production mode; memory and backlog trend each minute (bench/soak.py).
soak MINUTES="30": install
    .venv/bin/python bench/soak.py --minutes {{MINUTES}}
