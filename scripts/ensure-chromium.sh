#!/usr/bin/env bash
# Makes sure Debian's chromium is installed: lab/console drives the
# operator console in it, headless, through the DevTools protocol
# (chromedp). Installs it with apt-get when it is missing.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
  echo "ensure-chromium: $(chromium --version 2>/dev/null | head -1)"
  exit 0
fi
echo "ensure-chromium: installing chromium"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
echo "ensure-chromium: $(chromium --version 2>/dev/null | head -1)"
