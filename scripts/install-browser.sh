#!/usr/bin/env bash
# What the browser test (tests/serving/test_browser.py) needs: Chromium and its WebDriver,
# from Debian's packages, installed when missing and running as root. Never fails the caller:
# where nothing can be installed the test skips and says why.
set -uo pipefail
have() { command -v "$1" >/dev/null 2>&1; }
if { have chromium || have chromium-browser; } && have chromedriver; then
  echo "install-browser: chromium and chromedriver are installed"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-browser: not root, so not installing; install chromium and chromium-driver" \
    "(Debian/Ubuntu) for the browser test, which skips without them" >&2
  exit 0
fi
if ! have apt-get; then
  echo "install-browser: no apt-get here; install Chromium and chromedriver by hand" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium chromium-driver; then
  echo "install-browser: installed chromium and chromium-driver"
else
  echo "install-browser: apt-get could not install chromium chromium-driver;" \
    "the browser test will skip" >&2
fi
exit 0
