# syntax=docker/dockerfile:1
# One image for every component of gpushare-dra-driver; the entry point is `gpushare-dra` and
# the Helm chart picks the subcommand (`controller`, `kubelet-plugin`; `webhook`, `plan` and
# `simulate` work too):
#
#   docker build -t gpushare-dra-driver:0.1.0 .
#   docker run --rm gpushare-dra-driver:0.1.0 version
#
# The image runs as the non-root user gpushare (uid 10001), which is all the controller (and the
# webhook it hosts) needs. The kubelet plugin must run as root and privileged (NVML, GPU device
# nodes, host directories): the chart's DaemonSet sets runAsUser 0 and privileged itself.
# NVML is not in the image: it comes from the node's driver (the driver root mount, or the
# NVIDIA Container Toolkit). tests/deploy/test_dockerfile.py checks these properties; CI has no
# container engine and never builds the image.

# ---- build: a wheel of the project, then a virtual environment with it and its dependencies
FROM python:3.11-slim-bookworm AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# Only what the wheel is built from (pyproject.toml: hatchling, [tool.hatch.build.targets.wheel]).
COPY pyproject.toml README.md ./
COPY dra_driver ./dra_driver
RUN python -m pip wheel --no-deps --wheel-dir /dist .

RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install /dist/*.whl \
    && /opt/venv/bin/gpushare-dra version

# ---- runtime: the virtual environment only, on the same Python base
FROM python:3.11-slim-bookworm AS runtime

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
