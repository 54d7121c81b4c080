#!/usr/bin/env bash
# Installs Debian's chromium for the SDK's browser test when it is missing (the test
# drives it with playwright-core; no browser build is downloaded). Needs root or sudo.
set -euo pipefail
browser="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ -x "$browser" ]; then
    exit 0
fi
if ! command -v apt-get >/dev/null; then
    echo "error: $browser is missing and there is no apt-get to install chromium with" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
echo "installing chromium (Debian package) for the JS SDK's browser test" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
[ -x "$browser" ] || { echo "error: chromium installed but $browser is not there; set CHROMIUM_PATH" >&2; exit 1; }
