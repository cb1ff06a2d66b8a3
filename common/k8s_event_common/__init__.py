"""What k8s-event-bridge and its subscribers share: ``connecting`` (the NATS connection),
``credentials`` (NKey seed and .creds files), ``secrets`` (the keys never echoed)."""

__version__ = "0.1.0"
