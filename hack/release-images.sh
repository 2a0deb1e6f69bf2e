#!/usr/bin/env bash
# Builds what test/install installs, for this machine's platform, and prints
# one line for each: `<name> <image tarball> <image name> <chart>`.
#   current: this checkout's image (hack/image), sidecar-operator.test/sidecar-operator:dev,
#            and charts/sidecar-operator
#   then one line per earlier release of $RELEASES, oldest first, named by
#   it: the image and chart of its commit, built from a git worktree of it
#   (no registry is reachable), its image named sidecar-operator.test/sidecar-operator:<name>:
#   where helm upgrade starts, and where a downgrade goes. Each is cached in
#   bin/previous/<commit>, built once. A
#   clone without a release's commit (a shallow one) gets no line for it, and
#   a warning on stderr.
# $RELEASES lists name=commit, oldest first: the last two releases, the
# tagged v0.1.0 and 305ac12, the commit installed before it (the tag
# resolves to its commit in clones that fetch no tags).
# The go command's output shows only if a build fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=hack/lib.sh
. "$root/hack/lib.sh"
cd "$root"
RELEASES=${RELEASES:-305ac12=305ac12a9586cb18e65743ee2c9a35e76fa8cb0b v0.1.0=f56496a8f172bbbe7428d361f0d6ba394f742837}
platform=linux/$(go env GOARCH)
log=$(mktemp)
trees=()
cleanup() {
  rm -f "$log"
  for tree in "${trees[@]}"; do
    git worktree remove --force "$tree" >/dev/null 2>&1 || true
    rm -rf "$tree"
  done
}
trap cleanup EXIT

quietly "$log" go run ./hack/image -o bin/image -platforms "$platform"
echo "current $root/bin/image/sidecar-operator.tar sidecar-operator.test/sidecar-operator:dev $root/charts/sidecar-operator"

for release in $RELEASES; do
  name=${release%%=*} commit=${release#*=}
  out=$root/bin/previous/$commit
  tag=sidecar-operator.test/sidecar-operator:$name
  if [ ! -f "$out/sidecar-operator.tar" ]; then
    start=$SECONDS
    if ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
      echo "WARNING: commit $commit ($name) is not in this clone (a shallow clone?): no such release to upgrade from; git fetch --unshallow" >&2
      continue
    fi
    tree=$(mktemp -d)
    trees+=("$tree")
    git worktree add --detach "$tree" "$commit" >/dev/null 2>&1
    mkdir -p "$out"
    version=()
    # A release's binary says its version (hack/image -version, since v0.1.0).
    [[ $name == v* ]] && version=(-version "$name")
    quietly "$log" go run ./hack/image -C "$tree" -o "$out.tmp" -platforms "$platform" -tag "$tag" "${version[@]}"
    rm -rf "$out/chart" && cp -r "$tree/charts/sidecar-operator" "$out/chart"
    mv "$out.tmp/sidecar-operator.tar" "$out/sidecar-operator.tar" && rm -rf "$out.tmp"
    echo "built the image and chart of $name ($commit) in $(since "$start")" >&2
  fi
  echo "$name $out/sidecar-operator.tar $tag $out/chart"
done
