# syntax=docker/dockerfile:1
# The image that deploy/ runs:
#   docker build -t images.example.com/k8s-event-bridge:0.1.0 .

# --- build: the wheels of the bridge, of its subscribers (consumer/) and of their deps ----
FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY . .
RUN pip wheel --wheel-dir /wheels . './consumer[all]'

# --- final: a venv with the wheels installed, run as a non-root user -------------------
FROM python:3.11-slim
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
RUN groupadd --system --gid 65532 nonroot \
 && useradd --system --uid 65532 --gid 65532 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin nonroot
# Installed from the build stage's wheels only (no index); the wheels do not stay in a layer.
# The subscribers (python -m k8s_event_consumer.alerting / .remediation, deploy/consumers/)
# run from the same image.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --find-links /wheels k8s-event-bridge \
      'k8s-event-bridge-consumer[all]' \
 && k8s-event-bridge check-config > /dev/null \
 && REMEDIATION_KUBERNETES__CLUSTER=check k8s-event-remediation check-config > /dev/null \
 && k8s-event-alerting check-config > /dev/null
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080
ENTRYPOINT ["k8s-event-bridge"]
CMD ["run", "--config", "/etc/k8s-event-bridge/bridge.yaml"]
