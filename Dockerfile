# The image that deploy/ runs: the bridge and its subscribers (consumer/), from the lock files
# in requirements/ (`make lock`). docs/deploy.md ("The image") says how to build it:
#   DOCKER_BUILDKIT=1 docker build -t images.example.com/k8s-event-bridge:0.1.0 .
# BASE is the base image of both stages: the official python:3.11-slim unless you pass
# another with the same Python minor (--build-arg BASE=...). Where no registry can be reached,
# the tests build on a STAND-IN made from Debian's packages (e2e/build-image-base.sh,
# tools/image.py: `make image`) and say so. No `# syntax=` line: it would fetch a frontend
# image; BuildKit's built-in one builds the RUN --mount below.
# tests/unit/test_dockerfile.py checks what this file promises, tests/node/test_image.py the
# image built from it; tests/integration/test_install.py installs the same way outside Docker.
ARG BASE=python:3.11-slim

# --- build: every wheel the image needs, nothing fetched that the lock does not hash ------
FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY requirements/ requirements/
# The locked build tools (pip, setuptools); no build isolation below, so nothing else is
# fetched to build a wheel. This venv's pip also installs the final stage (mounted there).
RUN python -m venv /build \
 && /build/bin/pip install --only-binary=:all: --require-hashes -r requirements/build.txt
# The runtime dependencies, each file checked against the lock's hashes; an sdist among them
# (nkeys) is built here by the locked setuptools.
RUN /build/bin/pip wheel --require-hashes --no-build-isolation --wheel-dir /wheels \
      -r requirements/runtime.txt
# The bridge, the subscribers and what they share (common/) from this checkout, without their
# dependencies (above).
COPY . .
RUN /build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels ./common . ./consumer

# --- final: a venv of those wheels alone (no pip, no index, no compiler), non-root --------
FROM ${BASE}
# The version in the labels: pyproject.toml's (tests/unit/test_dockerfile.py checks), and the
# build fails below unless the wheels are that version.
ARG VERSION=0.1.0
# Where the source lives: set it when you publish the image (--build-arg SOURCE=...).
ARG SOURCE=https://git.example.com/k8s-event-bridge
LABEL org.opencontainers.image.title="k8s-event-bridge" \
      org.opencontainers.image.description="Kubernetes Events to NATS JetStream as CloudEvents (k8s-event-bridge), and its subscribers k8s-event-alerting, k8s-event-remediation, k8s-event-otlp and k8s-event-digests" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="$VERSION"
# Read-only root filesystem: nothing is written at run time but to /tmp (an emptyDir in
# deploy/); the bytecode is compiled when the wheels are installed.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
# For the pip of the build stage below only (ARG: not in the image's environment).
ARG PIP_DISABLE_PIP_VERSION_CHECK=1
ARG PIP_NO_CACHE_DIR=1
RUN groupadd --system --gid 65532 nonroot \
 && useradd --system --uid 65532 --gid 65532 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin nonroot
# Installed from the build stage's wheels only, by the build stage's pip (both mounted, in no
# layer): no index, no dependency resolution (pip check then proves nothing is missing). The
# subscribers (deploy/consumers/) run from the same image. Then the smoke checks: the version,
# and each program's check-config with its defaults. Last, the base's own installers go: pip,
# setuptools and wheel (the official base's site-packages holds nothing else), ensurepip and
# the wheels it bundles (the stand-in's /usr/share/python-wheels); /opt/venv needs none of them.
RUN --mount=type=bind,from=build,source=/build,target=/build \
    --mount=type=bind,from=build,source=/wheels,target=/wheels \
    /usr/local/bin/python -m venv --without-pip /opt/venv \
 && /build/bin/pip --python /opt/venv/bin/python install --no-index --no-deps /wheels/*.whl \
 && /build/bin/pip --python /opt/venv/bin/python check \
 && /opt/venv/bin/python -c 'import sys; from importlib.metadata import version as v; have = {v("k8s-event-bridge"), v("k8s-event-bridge-consumer"), v("k8s-event-bridge-common")}; sys.exit(None if have == {sys.argv[1]} else f"the wheels are {have}, VERSION is {sys.argv[1]}")' "$VERSION" \
 && k8s-event-bridge check-config > /dev/null \
 && REMEDIATION_KUBERNETES__CLUSTER=check k8s-event-remediation check-config > /dev/null \
 && k8s-event-alerting check-config > /dev/null \
 && k8s-event-otlp check-config > /dev/null \
 && k8s-event-digests check-config > /dev/null \
 && rm -rf /usr/local/bin/pip /usr/local/bin/pip3 /usr/local/bin/pip3.* /usr/local/bin/wheel \
      /usr/local/lib/python3.*/site-packages/* /usr/local/lib/python3.*/ensurepip \
      /usr/lib/python3.*/ensurepip /usr/share/python-wheels \
 && ! /usr/local/bin/python -c 'import pip' 2> /dev/null \
 && ! /opt/venv/bin/python -c 'import pip' 2> /dev/null
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080
ENTRYPOINT ["k8s-event-bridge"]
CMD ["run", "--config", "/etc/k8s-event-bridge/bridge.yaml"]
