#!/usr/bin/env bash
# Installs Debian's chromium for the admin page's browser test, when missing.
# Prints the binary's path.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "chromium is missing: apt-get install chromium (as root)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
fi
command -v chromium
