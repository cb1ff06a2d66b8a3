"""The running bridge: the tasks that move Events from the watch to JetStream, and what
reports on them.

``watching`` (one watcher per scope) → ``intake`` (filter, convert, queue) → the publisher →
``checkpointing``; ``pipeline`` starts them, stops them and drains; ``starting`` holds the
start-up steps' retries and the stop they give way to; ``health`` and ``http`` answer
``/readyz`` and ``/metrics``. The runtime reaches the API server, JetStream and the checkpoint
store only through the ports of ``ports`` (Protocols), so the same code runs against the real
servers and, in the tests, against in-memory fakes; it imports neither ``bridge.kube`` nor
``bridge.jetstream`` (checked by the import contracts in pyproject.toml).
"""
