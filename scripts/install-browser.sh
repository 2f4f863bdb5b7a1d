#!/usr/bin/env bash
# Install Debian's Chromium for the inspector's browser tests (tests/test_ui_browser.py).
# Idempotent: returns at once when chromium and the fonts are already installed.
# Playwright drives this system browser (executable_path=/usr/bin/chromium);
# `playwright install` (which downloads its own browsers) is not needed.
set -euo pipefail

# Fonts: DejaVu for Latin text, WenQuanYi Micro Hei (1.6 MB) so CJK lessons render in screenshots.
PACKAGES="chromium fonts-dejavu-core fonts-wqy-microhei"
# shellcheck disable=SC2086
if command -v chromium >/dev/null 2>&1 && dpkg -s $PACKAGES >/dev/null 2>&1; then
  echo "chromium already installed: $(chromium --version 2>/dev/null || echo /usr/bin/chromium)"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-browser: need root (or sudo) to apt-get install chromium" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $PACKAGES
echo "chromium installed: $(chromium --version 2>/dev/null || echo /usr/bin/chromium)"
