"""The end-to-end benchmark of k8s-event-bridge: ``python -m bench.run`` (``make bench``)."""
