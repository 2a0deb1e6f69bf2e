#!/usr/bin/env bash
# Installs Debian's chromium for the admin page's browser test, when missing,
# in one line on stderr (apt-get's output only if it fails). Prints the
# binary's path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"

install_chromium() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core
}

if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "chromium is missing: apt-get install chromium (as root)" >&2
    exit 1
  fi
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  start=$SECONDS
  quietly "$log" install_chromium
  echo "installed chromium $(dpkg-query -W -f '${Version}' chromium) (apt-get) in $(since "$start")" >&2
fi
command -v chromium
