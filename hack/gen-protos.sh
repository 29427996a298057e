#!/usr/bin/env bash
# Regenerates the committed Python gRPC stubs in dra_driver/_proto from api/kubelet/**/api.proto.
#
# Usage: hack/gen-protos.sh [OUTPUT_ROOT]
#   OUTPUT_ROOT defaults to the repository root. Only OUTPUT_ROOT/dra_driver/_proto is replaced.
#   The interpreter is $PYTHON, else .venv/bin/python if present, else python3 on PATH. It must
#   have the exact generator pins of pyproject's "protogen" group, so the output is reproducible
#   byte for byte (tests/proto/test_stubs_up_to_date.py checks that).
set -euo pipefail

readonly GRPCIO_TOOLS_VERSION="1.85.1"
readonly MYPY_PROTOBUF_VERSION="5.1.0"

# Source proto (under api/kubelet) -> Python package path (under dra_driver/_proto).
# Python package names cannot contain "-", hence dra-health -> dra_health.
readonly PROTOS=(
  "pluginregistration/v1:pluginregistration/v1"
  "dra/v1:dra/v1"
  "dra/v1beta1:dra/v1beta1"
  "dra-health/v1alpha1:dra_health/v1alpha1"
  "dra-health/v1:dra_health/v1"
)

die() {
  echo "gen-protos: $*" >&2
  exit 1
}

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
output_root="${1:-${repo_root}}"
mkdir -p "${output_root}" || die "cannot create output root '${output_root}'"
output_root="$(cd "${output_root}" && pwd)"

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "${repo_root}/.venv/bin/python" ]]; then
    PYTHON="${repo_root}/.venv/bin/python"
  else
    PYTHON="python3"
  fi
fi
# Make the interpreter path absolute: protoc runs from a temporary directory below.
if [[ "${PYTHON}" == */* && "${PYTHON}" != /* ]]; then
  PYTHON="${PWD}/${PYTHON}"
fi
python_path="$(command -v "${PYTHON}")" || die "python interpreter '${PYTHON}' not found"
PYTHON="${python_path}"

installed_version() {
  "${PYTHON}" - "$1" <<'EOF'
import importlib.metadata
import sys

try:
    print(importlib.metadata.version(sys.argv[1]))
except importlib.metadata.PackageNotFoundError:
    print("not installed")
EOF
}

check_pin() {
  local dist="$1" want="$2" have
  have="$(installed_version "${dist}")"
  if [[ "${have}" != "${want}" ]]; then
    die "${dist}==${want} is required (found: ${have}) for ${PYTHON}. Install the pinned" \
      "generators, e.g. '${PYTHON} -m pip install grpcio-tools==${GRPCIO_TOOLS_VERSION}" \
      "mypy-protobuf==${MYPY_PROTOBUF_VERSION}' (pyproject dependency group 'protogen')."
  fi
}
check_pin grpcio-tools "${GRPCIO_TOOLS_VERSION}"
check_pin mypy-protobuf "${MYPY_PROTOBUF_VERSION}"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
src_root="${work}/src"
gen_root="${work}/gen"
plugin_dir="${work}/plugins"
mkdir -p "${src_root}" "${gen_root}" "${plugin_dir}"

# protoc plugins that run mypy-protobuf with the same interpreter, wherever its scripts live.
for plugin in main grpc; do
  name="protoc-gen-mypy"
  [[ "${plugin}" == grpc ]] && name="protoc-gen-mypy_grpc"
  printf '#!/bin/sh\nexec "%s" -c "import sys; from mypy_protobuf.main import %s; sys.exit(%s())"\n' \
    "${PYTHON}" "${plugin}" "${plugin}" >"${plugin_dir}/${name}"
  chmod +x "${plugin_dir}/${name}"
done

# Lay the sources out as dra_driver/_proto/<pkg>/api.proto so that the generated imports are
# absolute inside our package and every file has a distinct name in the descriptor pool.
proto_files=()
package_dirs=("dra_driver/_proto")
for entry in "${PROTOS[@]}"; do
  src="${repo_root}/api/kubelet/${entry%%:*}/api.proto"
  pkg="dra_driver/_proto/${entry#*:}"
  [[ -f "${src}" ]] || die "missing source ${src}"
  mkdir -p "${src_root}/${pkg}"
  cp "${src}" "${src_root}/${pkg}/api.proto"
  proto_files+=("${pkg}/api.proto")
  parent="$(dirname "${pkg}")"
  [[ " ${package_dirs[*]} " == *" ${parent} "* ]] || package_dirs+=("${parent}")
  package_dirs+=("${pkg}")
done

(
  cd "${src_root}"
  "${PYTHON}" -m grpc_tools.protoc \
    -I . \
    --plugin="protoc-gen-mypy=${plugin_dir}/protoc-gen-mypy" \
    --plugin="protoc-gen-mypy_grpc=${plugin_dir}/protoc-gen-mypy_grpc" \
    --python_out="${gen_root}" \
    --grpc_python_out="${gen_root}" \
    --mypy_out="${gen_root}" \
    --mypy_grpc_out="${gen_root}" \
    "${proto_files[@]}"
)

for dir in "${package_dirs[@]}"; do
  mkdir -p "${gen_root}/${dir}"
  if [[ "${dir}" == "dra_driver/_proto" ]]; then
    doc="Generated kubelet gRPC stubs; do not edit, regenerate with hack/gen-protos.sh."
  else
    doc="Generated from api/kubelet; do not edit, regenerate with hack/gen-protos.sh."
  fi
  printf '"""%s"""\n' "${doc}" >"${gen_root}/${dir}/__init__.py"
done

# Replace only dra_driver/_proto, and only once generation has succeeded.
mkdir -p "${output_root}/dra_driver"
rm -rf "${output_root}/dra_driver/_proto"
cp -R "${gen_root}/dra_driver/_proto" "${output_root}/dra_driver/_proto"
find "${output_root}/dra_driver/_proto" -type d -exec chmod 0755 {} +
find "${output_root}/dra_driver/_proto" -type f -exec chmod 0644 {} +
echo "gen-protos: wrote $(find "${output_root}/dra_driver/_proto" -type f | wc -l) files" \
  "under ${output_root}/dra_driver/_proto"
