#!/usr/bin/env bash
# Makes sure a Chromium is there for the console's browser tests
# (tests/integration/test_console_browser.py): Debian's chromium package, installed with
# apt-get when this runs as root on a Debian-like machine and none is on PATH. Never fails the
# build: without a Chromium the browser tests skip and say why. Playwright never downloads a
# browser of its own; the tests give it this one (executable_path).
set -uo pipefail
say() { echo "make: $*" >&2; }

if [[ -n ${SWITCHBOARD_CHROMIUM:-} ]] || command -v chromium >/dev/null 2>&1 \
        || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    say "no Chromium on PATH and no root apt-get to install it: the console's browser tests will skip (apt-get install chromium)"
    exit 0
fi
say "installing Debian's chromium for the console's browser tests (once)"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; then
    apt-get update -q >/dev/null 2>&1 || true
    if ! apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; then
        say "apt-get could not install chromium: the console's browser tests will skip"
    fi
fi
exit 0
