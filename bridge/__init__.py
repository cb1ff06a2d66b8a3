"""k8s-event-bridge: Kubernetes Events -> CloudEvents -> NATS JetStream."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("k8s-event-bridge")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
