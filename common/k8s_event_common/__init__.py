"""What k8s-event-bridge and its subscribers share, in one copy that imports neither of them:
``connecting`` (the NATS connection), ``options`` (its options and their checks),
``credentials`` (NKey seed and .creds files), ``secrets`` (the keys never echoed),
``cloudevents`` (the decoder of the stream's messages), ``logformat`` (the log line format),
``durations`` (``1m30s`` → seconds), ``clock`` (the one ``Clock``), ``http`` (the probes' and
the scraper's server), ``metrics`` (the Prometheus metrics' pieces), ``owners`` (the table of
kinds and the one owner walk),
``kube`` (the Kubernetes connection, its error tree and checked paths; the ``kube`` extra) and
``configuring`` (the YAML + environment loading and the NATS connection's keys;
pydantic-settings, the ``settings`` extra: settings modules only)."""

__version__ = "0.1.0"
