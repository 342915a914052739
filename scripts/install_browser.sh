#!/usr/bin/env bash
# Install headless Chromium (Debian's package) for the browser test, and a CJK font
# so that figures with Chinese labels render. Needs root and apt-get; elsewhere it
# says so and the browser test is skipped (except under CI=true, where it fails).
set -uo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Debian's chromium and a CJK font for the browser test ..."
  if apt-get update -qq >/dev/null && \
     DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-noto-cjk >/dev/null; then
    exit 0
  fi
  echo "NOTE: apt-get could not install chromium."
else
  echo "NOTE: headless Chromium (/usr/bin/chromium) is not installed and this set-up cannot"
  echo "      install it (it needs root and apt-get). The browser test will be skipped."
fi
exit 0
