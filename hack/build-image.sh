#!/usr/bin/env bash
# Builds the production image from ./Dockerfile with buildah: no container daemon, no container
# registry. The base is a minimal Debian bookworm root filesystem made with mmdebstrap from the
# Debian mirror the host's apt uses (cached, keyed on its package list, rebuilt after 7 days), the
# build context is the project's wheel built here, and the image's RUN steps reach only PyPI.
# Needs root, buildah and mmdebstrap (apt-get install buildah mmdebstrap).
#
#   hack/build-image.sh [--check] [--tag T] [--base IMAGE] [--refresh-base]
#
# --check then runs the image: `gpushare-dra version` and `gpushare-dra kubelet-plugin --help`
# succeed, it runs as uid 10001, holds no test or simulator code, none of the simulator's
# dependencies, no pip or setuptools and no NVML library; and prints the image's size.
#
# Environment (only GPUSHARE_-prefixed variables are read):
#   GPUSHARE_IMAGE_CHECK=skip-if-unavailable  exit 0 with "skipping image build: <reason>" when
#                          buildah or mmdebstrap is missing or cannot run here (.ci/run sets it);
#                          any other failure still fails.
#   GPUSHARE_IMAGE_WORKDIR buildah storage, rootfs cache and scratch (default
#                          /var/tmp/gpushare-image; outside the checkout, so clean CI clones work).
#   GPUSHARE_DEBIAN_SOURCES an apt sources file (one-line or deb822) to make the base from,
#                          instead of the bookworm entries of the host's /etc/apt sources.
#   GPUSHARE_PYTHON        the python that builds the wheel (default .venv/bin/python, else
#                          python3).
#   GPUSHARE_CA_BUNDLE     the CA bundle pip trusts inside the build (default the host's
#                          /etc/ssl/certs/ca-certificates.crt, so a TLS-inspecting proxy the host
#                          trusts works); passed as a build secret, never stored in the image.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

readonly PROG=build-image.sh
readonly DEFAULT_TAG=localhost/gpushare-dra-driver:dev
readonly BASE_TAG=localhost/gpushare-base:bookworm
readonly SUITE=bookworm
# Everything that decides the rootfs's content; its hash names the cached tarball.
readonly BASE_PACKAGES=python3,python3-venv,ca-certificates,passwd
readonly MMDEBSTRAP_OPTS=(
  --variant=essential
  "--include=$BASE_PACKAGES"
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  '--dpkgopt=path-exclude=/usr/share/doc/*'
  '--dpkgopt=path-include=/usr/share/doc/*/copyright'
  '--dpkgopt=path-exclude=/usr/share/man/*'
  '--dpkgopt=path-exclude=/usr/share/info/*'
  '--dpkgopt=path-exclude=/usr/share/locale/*'
  # Snapshot-backed mirrors serve Release files past their Valid-Until date.
  '--aptopt=Acquire::Check-Valid-Until "false"'
)
readonly BASE_MAX_AGE_DAYS=7
readonly RUNTIME_UID=10001
# Must not be in the image: the simulator's code and the dependencies only it needs, and build
# tools. gpushare-dra-simulator is the simulator's own distribution.
readonly ABSENT_MODULES=(gpushare_simulator tests)
readonly ABSENT_DISTRIBUTIONS=(
  gpushare-dra-simulator kubernetes-validate jsonschema cryptography pip setuptools wheel
)

usage() {
  cat <<EOF
usage: $PROG [--check] [--tag T] [--base IMAGE] [--refresh-base]

Builds the gpushare-dra-driver image from ./Dockerfile with buildah (no daemon, no registry).

  --check          run the built image and check what it holds; print its size
  --tag T          the image's name (default $DEFAULT_TAG)
  --base IMAGE     build on IMAGE (pulled if missing) instead of the mmdebstrap bookworm base
  --refresh-base   remake the mmdebstrap base even if the cached one is fresh
  -h, --help       this text

Environment: GPUSHARE_IMAGE_CHECK=skip-if-unavailable, GPUSHARE_IMAGE_WORKDIR,
GPUSHARE_DEBIAN_SOURCES, GPUSHARE_PYTHON, GPUSHARE_CA_BUNDLE (see the comment at the top of this script).
EOF
}

die() {
  echo "$PROG: error: $*" >&2
  exit 1
}

# Buildah or mmdebstrap cannot run on this machine: skip only when asked to.
unavailable() {
  if [[ ${GPUSHARE_IMAGE_CHECK:-} == skip-if-unavailable ]]; then
    echo "skipping image build: $*"
    exit 0
  fi
  die "cannot build the image here: $* (GPUSHARE_IMAGE_CHECK=skip-if-unavailable skips instead)"
}

check=false
refresh_base=false
tag=$DEFAULT_TAG
base=""
while (($#)); do
  case $1 in
    --check) check=true ;;
    --refresh-base) refresh_base=true ;;
    --tag | --base)
      [[ $# -ge 2 && -n $2 ]] || {
        echo "$PROG: $1 needs a value" >&2
        exit 2
      }
      if [[ $1 == --tag ]]; then tag=$2; else base=$2; fi
      shift
      ;;
    --tag=?*) tag=${1#--tag=} ;;
    --base=?*) base=${1#--base=} ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      echo "$PROG: unknown argument: $1" >&2
      usage >&2
      exit 2
      ;;
  esac
  shift
done

case ${GPUSHARE_IMAGE_CHECK:-} in
  "" | skip-if-unavailable) ;;
  *) die "GPUSHARE_IMAGE_CHECK must be empty or skip-if-unavailable, not '$GPUSHARE_IMAGE_CHECK'" ;;
esac

# ---- can buildah (and mmdebstrap) run here?
[[ $(uname -s) == Linux ]] || unavailable "buildah needs Linux, this is $(uname -s)"
[[ $EUID -eq 0 ]] || unavailable "not root (this script runs buildah and mmdebstrap as root)"
command -v buildah >/dev/null || unavailable "buildah is not installed (apt-get install buildah)"
if [[ -z $base ]]; then
  command -v mmdebstrap >/dev/null ||
    unavailable "mmdebstrap is not installed (apt-get install mmdebstrap)"
fi

work=${GPUSHARE_IMAGE_WORKDIR:-/var/tmp/gpushare-image}
mkdir -p "$work"
work=$(cd "$work" && pwd)
# One build at a time per work directory: buildah's vfs store and the rootfs cache are shared.
exec 9>"$work/lock"
flock 9

export BUILDAH_ISOLATION=chroot
bah=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
if ! probe=$("${bah[@]}" info 2>&1 >/dev/null); then
  unavailable "buildah cannot run: $(tail -n 3 <<<"$probe")"
fi

scratch=$(mktemp -d "$work/scratch.XXXXXX")
containers=()
cleanup() {
  local ctr
  for ctr in "${containers[@]}"; do
    "${bah[@]}" rm "$ctr" >/dev/null 2>&1 || true
  done
  rm -rf "$scratch"
}
trap cleanup EXIT

elapsed() {
  echo "$((SECONDS - $1)) s"
}

# ---- the Debian mirrors for bookworm, from the host's apt sources
# Prints "deb URI SUITE main" for bookworm, bookworm-updates and bookworm-security: for each, the
# host's entry for that suite, else the URI the host uses for the same role (archive, updates,
# security) of another Debian release. One-line (*.list) and deb822 (*.sources) files are read.
debian_sources() {
  local files=()
  [[ -f /etc/apt/sources.list ]] && files+=(/etc/apt/sources.list)
  local f
  for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && files+=("$f")
  done
  ((${#files[@]})) || return 0
  awk -v want="$SUITE" '
    function emit(types, uris, suites, comps,    nt, t, nu, u, ns, s, i, j, k, debian, role, rel) {
      if (types !~ /(^|[ \t])deb([ \t]|$)/ || comps !~ /(^|[ \t])main([ \t]|$)/) return
      nu = split(uris, u, /[ \t]+/); ns = split(suites, s, /[ \t]+/)
      for (j = 1; j <= ns; j++) {
        if (s[j] == "") continue
        rel = s[j]; role = "archive"
        if (rel ~ /-security$/) { role = "security"; sub(/-security$/, "", rel) }
        else if (rel ~ /-updates$/) { role = "updates"; sub(/-updates$/, "", rel) }
        else if (rel ~ /-/) continue
        if (rel !~ /^(buster|bullseye|bookworm|trixie|forky|duke|sid|unstable|testing|stable|oldstable)$/) continue
        for (i = 1; i <= nu; i++) {
          if (u[i] == "") continue
          k = (rel == want ? 0 : 1)
          if (!((role, k) in found)) found[role, k] = u[i]
        }
      }
    }
    FNR == 1 { flush(); deb822 = (FILENAME ~ /\.sources$/) }
    function flush() {
      if (deb822 && uris != "" && tolower(enabled) != "no") emit(types, uris, suites, comps)
      types = uris = suites = comps = ""; enabled = "yes"; last = ""
    }
    deb822 && /^[ \t]*$/ { flush(); next }
    /^[ \t]*#/ { next }
    deb822 && /^[ \t]/ { if (last == "uris") uris = uris " " $0; else if (last == "suites") suites = suites " " $0; next }
    deb822 {
      key = tolower($0); sub(/:.*/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
      last = key
      if (key == "types") types = val; else if (key == "uris") uris = val
      else if (key == "suites") suites = val; else if (key == "components") comps = val
      else if (key == "enabled") enabled = val
      next
    }
    $1 == "deb" {
      line = $0; sub(/^deb[ \t]+/, "", line); sub(/^\[[^]]*\][ \t]*/, "", line)
      n = split(line, w, /[ \t]+/); rest = ""
      for (i = 3; i <= n; i++) rest = rest " " w[i]
      emit("deb", w[1], w[2], rest)
    }
    END {
      flush()
      split("archive updates security", roles, " ")
      split(want " " want "-updates " want "-security", names, " ")
      for (r = 1; r <= 3; r++) {
        uri = ((roles[r], 0) in found) ? found[roles[r], 0] : found[roles[r], 1]
        if (uri != "") printf "deb %s %s main\n", uri, names[r]
      }
    }
  ' "${files[@]}"
}

# ---- the base image: a mmdebstrap bookworm rootfs in buildah's store as $BASE_TAG
make_base() {
  local key tar stamp current sources=() line
  key=$(printf '%s\n' "$SUITE" "${MMDEBSTRAP_OPTS[@]}" | sha256sum | cut -c1-16)
  tar=$work/rootfs-$SUITE-$key.tar
  if $refresh_base || [[ -z $(find "$tar" -maxdepth 0 -mtime "-$BASE_MAX_AGE_DAYS" 2>/dev/null) ]]; then
    if [[ -n ${GPUSHARE_DEBIAN_SOURCES:-} ]]; then
      [[ -f $GPUSHARE_DEBIAN_SOURCES ]] || die "GPUSHARE_DEBIAN_SOURCES=$GPUSHARE_DEBIAN_SOURCES is not a file"
      sources=("$GPUSHARE_DEBIAN_SOURCES")
    else
      while IFS= read -r line; do sources+=("$line"); done < <(debian_sources)
      [[ ${#sources[@]} -gt 0 && ${sources[0]} == *" $SUITE main" ]] ||
        die "the host's apt sources name no Debian archive mirror; set GPUSHARE_DEBIAN_SOURCES to an apt sources file for $SUITE"
    fi
    echo "==> mmdebstrap $SUITE ($BASE_PACKAGES) from: ${sources[*]}"
    local start=$SECONDS
    if ! mmdebstrap "${MMDEBSTRAP_OPTS[@]}" "$SUITE" "${tar%.tar}.partial.tar" "${sources[@]}" \
      >"$scratch/mmdebstrap.log" 2>&1; then
      tail -n 30 "$scratch/mmdebstrap.log" >&2
      die "mmdebstrap failed to make the $SUITE base (log above)"
    fi
    mv "${tar%.tar}.partial.tar" "$tar"
    # Tarballs of an older package list are not used again.
    find "$work" -maxdepth 1 -name "rootfs-$SUITE-*.tar" ! -path "$tar" -delete
    echo "    rootfs $(du -m "$tar" | cut -f1) MB in $(elapsed "$start")"
  else
    echo "==> cached $SUITE rootfs $tar"
  fi
  stamp="$key-$(stat -c %Y "$tar")"
  current=$("${bah[@]}" inspect --type image --format '{{index .ImageAnnotations "dev.gpushare.rootfs"}}' \
    "$BASE_TAG" 2>/dev/null || true)
  if [[ $current != "$stamp" ]]; then
    echo "==> importing the rootfs as $BASE_TAG"
    local ctr
    ctr=$("${bah[@]}" from --pull=never scratch)
    containers+=("$ctr")
    "${bah[@]}" add "$ctr" "$tar" / >/dev/null
    "${bah[@]}" config \
      --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --env LANG=C.UTF-8 --cmd /bin/bash --annotation "dev.gpushare.rootfs=$stamp" "$ctr"
    "${bah[@]}" commit --quiet --rm "$ctr" "$BASE_TAG" >/dev/null
    containers=()
  fi
  base=$BASE_TAG
}

if [[ -z $base ]]; then
  make_base
fi

# ---- the build context: the project's wheel, nothing else
python=${GPUSHARE_PYTHON:-}
if [[ -z $python ]]; then
  if [[ -x .venv/bin/python ]]; then python=.venv/bin/python; else python=python3; fi
fi
context=$scratch/context
mkdir -p "$context"
echo "==> building the wheel with $python"
"$python" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$context" . ||
  die "building the project's wheel failed"
wheels=("$context"/*.whl)
[[ ${#wheels[@]} -eq 1 && -f ${wheels[0]} ]] || die "expected one wheel, got: ${wheels[*]}"
wheel_name=$(basename "${wheels[0]}")
version=$(cut -d- -f2 <<<"$wheel_name")
echo "    $wheel_name"

# ---- the image
labels=(--label "org.opencontainers.image.version=$version")
# The commit, only when the tracked files are that commit's.
if revision=$(git rev-parse HEAD 2>/dev/null) && [[ -z $(git status --porcelain --untracked-files=no) ]]; then
  labels+=(--label "org.opencontainers.image.revision=$revision")
fi
secrets=()
ca_bundle=${GPUSHARE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
if [[ -s $ca_bundle ]]; then
  secrets=(--secret "id=ca_bundle,src=$ca_bundle")
elif [[ -n ${GPUSHARE_CA_BUNDLE:-} ]]; then
  die "GPUSHARE_CA_BUNDLE=$GPUSHARE_CA_BUNDLE is not a non-empty file"
fi
echo "==> buildah bud -t $tag (base $base${secrets:+, pip trusts $ca_bundle})"
start=$SECONDS
"${bah[@]}" bud --isolation chroot --layers=false --pull=false --format oci \
  --build-arg "BASE_IMAGE=$base" "${labels[@]}" "${secrets[@]}" \
  -f "$PWD/Dockerfile" -t "$tag" "$context" || die "buildah bud failed"
echo "    built $tag in $(elapsed "$start")"
# vfs keeps every layer in full: drop the images this build (or a base re-import) left untagged.
"${bah[@]}" rmi --prune >/dev/null 2>&1 || true

size=$("${bah[@]}" images --noheading --format '{{.Size}}' "$tag") || die "cannot read the size of $tag"

if ! $check; then
  echo "image $tag: $size (uncompressed)"
  exit 0
fi

# ---- --check: run the image and check what it holds
echo "==> checking $tag"
ctr=$("${bah[@]}" from --pull=never "$tag")
containers+=("$ctr")
failures=0
in_image() {
  # Runs as the image's USER with its ENV, like a pod without a securityContext override.
  "${bah[@]}" run --isolation chroot "$ctr" -- "$@"
}
expect() {
  local what=$1
  shift
  local out
  if out=$(in_image "$@" 2>&1); then
    echo "    ok: $what"
  else
    echo "    FAILED: $what" >&2
    # shellcheck disable=SC2001 # indent every line of the output
    sed 's/^/      /' <<<"$out" >&2
    failures=$((failures + 1))
  fi
}

user=$("${bah[@]}" inspect --type image --format '{{.OCIv1.Config.User}}' "$tag") ||
  die "cannot inspect $tag"
if [[ $user == "$RUNTIME_UID:$RUNTIME_UID" ]]; then
  echo "    ok: USER is $user"
else
  echo "    FAILED: USER is '$user', not $RUNTIME_UID:$RUNTIME_UID" >&2
  failures=$((failures + 1))
fi
expect "gpushare-dra version reports $version" sh -c \
  "out=\$(gpushare-dra version) && printf '%s\n' \"\$out\" && printf '%s\n' \"\$out\" | head -n1 | grep -qx 'gpushare-dra $version'"
expect "gpushare-dra kubelet-plugin --help" gpushare-dra kubelet-plugin --help
expect "runs as uid $RUNTIME_UID" sh -c "test \"\$(id -u)\" = $RUNTIME_UID"
expect "python on PATH is /opt/venv's, Python >= 3.11" python -c \
  'import sys; assert sys.version_info >= (3, 11), sys.version; assert sys.prefix == "/opt/venv", sys.prefix'
expect "no test or simulator modules: ${ABSENT_MODULES[*]}" python -c '
import importlib.util, sys
found = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None]
assert not found, f"present: {found}"
' "${ABSENT_MODULES[@]}"
expect "no distributions: ${ABSENT_DISTRIBUTIONS[*]}" python -c '
import importlib.metadata as md, sys
found = []
for name in sys.argv[1:]:
    try:
        found.append(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        pass
assert not found, f"present: {found}"
' "${ABSENT_DISTRIBUTIONS[@]}"
# shellcheck disable=SC2016 # expanded by the image's sh
expect "no NVML library (libnvidia-ml.so*) in the image" sh -c \
  'found=$(find / -xdev -name "libnvidia-ml.so*" 2>/dev/null); [ -z "$found" ] || { echo "$found"; exit 1; }'

venv_mb=$(in_image du -sm /opt/venv 2>/dev/null | cut -f1) || venv_mb="?"
echo "image $tag: $size (uncompressed; /opt/venv $venv_mb MB)"
if ((failures)); then
  die "$failures image check(s) failed for $tag"
fi
echo "image check passed"
