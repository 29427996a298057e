#!/usr/bin/env bash
# Sets the release version. It is written in one place, dra_driver/__init__.py (the wheel, the
# simulator distribution and the CLI read it there); the chart must spell it literally, so this
# script copies it into Chart.yaml's version and appVersion. tests/test_version.py checks they
# agree and that nothing else in the repository spells it.
#
#   hack/set-version.sh 0.3.0
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version=${1:?usage: hack/set-version.sh X.Y.Z}
if [[ ! $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
  echo "set-version: $version is not a semantic version (X.Y.Z or X.Y.Z-pre)" >&2
  exit 2
fi
sed -i -E "s/^__version__ = \".*\"$/__version__ = \"$version\"/" dra_driver/__init__.py
chart=deploy/helm/gpushare-dra-driver/Chart.yaml
sed -i -E "s/^version: .*/version: $version/; s/^appVersion: .*/appVersion: \"$version\"/" "$chart"
if ! grep -q "^## $version" CHANGELOG.md; then
  echo "set-version: CHANGELOG.md has no section '## $version' yet: add one" >&2
fi
echo "version $version set in dra_driver/__init__.py and $chart"
