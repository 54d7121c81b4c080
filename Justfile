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
    .venv/bin/python -m pytest {{ARGS}}
    {{ if ARGS == "" { just_executable() + " test-js" } else { "true" } }}

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
