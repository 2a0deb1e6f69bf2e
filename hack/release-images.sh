#!/usr/bin/env bash
# Builds what test/install installs, for this machine's platform, and prints
# one line for each: `<name> <image tarball> <image name> <chart>`.
#   current:  this checkout's image (hack/image), sidecar-operator.test/sidecar-operator:dev,
#             and charts/sidecar-operator
#   previous: the image and chart of $PREVIOUS, the commit before issue 26's
#             first change, built from a git worktree of it (no tag exists and
#             no registry is reachable): helm upgrade's starting point. Cached
#             in bin/previous/<commit>, built once. A clone without the commit
#             (a shallow one) gets no such line, and a warning on stderr.
# The go command's output shows only if a build fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
cd "$root"
PREVIOUS=${PREVIOUS:-305ac12a9586cb18e65743ee2c9a35e76fa8cb0b}
platform=linux/$(go env GOARCH)
log=$(mktemp)
trap 'rm -f "$log"' EXIT

quietly "$log" go run ./hack/image -o bin/image -platforms "$platform"
echo "current $root/bin/image/sidecar-operator.tar sidecar-operator.test/sidecar-operator:dev $root/charts/sidecar-operator"

out=$root/bin/previous/$PREVIOUS
tag=sidecar-operator.test/sidecar-operator:${PREVIOUS:0:7}
if [ ! -f "$out/sidecar-operator.tar" ]; then
  start=$SECONDS
  if ! git cat-file -e "$PREVIOUS^{commit}" 2>/dev/null; then
    echo "WARNING: commit $PREVIOUS is not in this clone (a shallow clone?): no previous release to upgrade from; git fetch --unshallow" >&2
    exit 0
  fi
  tree=$(mktemp -d)
  trap 'rm -f "$log"; git worktree remove --force "$tree" >/dev/null 2>&1 || true; rm -rf "$tree"' EXIT
  git worktree add --detach "$tree" "$PREVIOUS" >/dev/null 2>&1
  mkdir -p "$out"
  quietly "$log" go run ./hack/image -C "$tree" -o "$out.tmp" -platforms "$platform" -tag "$tag"
  rm -rf "$out/chart" && cp -r "$tree/charts/sidecar-operator" "$out/chart"
  mv "$out.tmp/sidecar-operator.tar" "$out/sidecar-operator.tar" && rm -rf "$out.tmp"
  echo "built the image and chart of $PREVIOUS in $(since "$start")" >&2
fi
echo "previous $out/sidecar-operator.tar $tag $out/chart"
