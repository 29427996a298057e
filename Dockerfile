# syntax=docker/dockerfile:1
# One image for every component of gpushare-dra-driver; the entry point is `gpushare-dra` and
# the Helm chart picks the subcommand (`controller`, `kubelet-plugin`, `webhook`, `plan`).
#
# The build context is a directory holding the project's wheel and nothing else; the image never
# sees the source tree. Two ways to build it:
#
#   # Offline from any container registry (buildah + mmdebstrap, as root, no daemon): makes a
#   # Debian bookworm base with mmdebstrap from the host's apt mirror, builds the wheel, builds
#   # this file with buildah, and with --check runs the image and checks what it holds.
#   ./hack/build-image.sh --check --tag gpushare-dra-driver:<version>
#
#   # With docker or podman and the usual base from Docker Hub:
#   python3 -m pip wheel --no-deps --wheel-dir dist/ .
#   docker build -f Dockerfile -t gpushare-dra-driver:<version> dist/
#   docker run --rm gpushare-dra-driver:<version> version
#
# BASE_IMAGE is any Debian bookworm image with python3 (>= 3.11) and python3-venv: the
# python:3.11-slim-bookworm default (/usr/local/bin/python3) or the script's mmdebstrap base
# (/usr/bin/python3); both stages must use the same one, since the venv links to its python3.
#
# The image runs as the non-root user gpushare (uid 10001), which is all the controller (and the
# webhook it hosts) needs. The kubelet plugin must run as root and privileged (NVML, GPU device
# nodes, host directories): the chart's DaemonSet sets runAsUser 0 and privileged itself.
# NVML is not in the image: it comes from the node's driver (the driver root mount, or the
# NVIDIA Container Toolkit). tests/deploy/test_dockerfile.py checks these properties; CI builds
# the image with hack/build-image.sh --check where buildah can run.
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---- build: a virtual environment with the project's wheel and its dependencies (from PyPI)
FROM ${BASE_IMAGE} AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_PROGRESS_BAR=off \
    PYTHONDONTWRITEBYTECODE=1

COPY *.whl /dist/
# The optional secret ca_bundle is a CA bundle for pip to trust instead of the base's (a proxy
# that re-signs TLS); hack/build-image.sh passes the host's. A secret is never in a layer.
# pip and setuptools (ensurepip puts them in every venv) are build tools: they leave the venv
# before the runtime stage copies it.
RUN --mount=type=secret,id=ca_bundle,required=false \
    set -eu; \
    if [ -s /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle; fi; \
    set -- /dist/*.whl; \
    if [ "$#" -ne 1 ]; then \
      echo "the build context must hold exactly one wheel, found: $*" >&2; exit 1; \
    fi; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/python -m pip install "$1"; \
    /opt/venv/bin/python -m pip uninstall --yes pip setuptools; \
    /opt/venv/bin/gpushare-dra version

# ---- runtime: the virtual environment only, on the same base
FROM ${BASE_IMAGE} AS runtime

LABEL org.opencontainers.image.title="gpushare-dra-driver" \
      org.opencontainers.image.description="Kubernetes DRA driver that shares NVIDIA GPUs by cores and memory" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN groupadd --system --gid 10001 gpushare \
    && useradd --system --uid 10001 --gid gpushare --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gpushare

COPY --from=build /opt/venv /opt/venv

USER 10001:10001
ENTRYPOINT ["gpushare-dra"]
CMD ["--help"]
